// Transient database failures are classified once, in pg/: whatever shape libpqxx 6.4 gives them,
// they leave exec(), Work and Pool::acquire() as Unavailable, with outcome_unknown() set exactly
// when a write may have committed; other SQL errors pass through unchanged.
#include <catch2/catch.hpp>

#include <thread>

#include "errors/errors.h"
#include "pg/pg.h"
#include "tests/support/test_database.h"

using namespace runledger;
using namespace std::chrono_literals;

namespace {

constexpr pg::Statement kLockRow{"test_lock_row", "SELECT v FROM t WHERE k = 1 FOR UPDATE"};
constexpr pg::Statement kUpdateRow{"test_update_row", "UPDATE t SET v = v + 1 WHERE k = $1"};
constexpr pg::Statement kSleep{"test_sleep", "SELECT pg_sleep($1::float8)"};
constexpr pg::Statement kInsert{"test_insert", "INSERT INTO t (k, v) VALUES ($1, 0)"};
constexpr pg::Statement kPid{"test_pid", "SELECT pg_backend_pid()"};
constexpr pg::Statement kOne{"test_one", "SELECT 1"};

struct Table {
  Table() {
    pqxx::connection conn(db.url());
    pqxx::nontransaction tx(conn);
    tx.exec("CREATE TABLE t (k int PRIMARY KEY, v int NOT NULL)");
    tx.exec("INSERT INTO t VALUES (1, 0), (2, 0)");
  }
  testing::TestDatabase db;
};

// The outcome of `fn` as the Unavailable it threw; fails the test if it threw anything else.
template <class F>
Unavailable unavailable_from(F&& fn) {
  try {
    fn();
  } catch (const Unavailable& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("expected Unavailable, got: " << e.what());
  }
  FAIL("expected Unavailable, nothing was thrown");
  throw std::logic_error("unreachable");
}

void terminate_backend(const std::string& url, int pid) {
  pqxx::connection admin(url);
  pqxx::nontransaction tx(admin);
  tx.exec_params("SELECT pg_terminate_backend($1)", pid);
  // pg_terminate_backend only signals: wait until the backend is gone.
  for (int i = 0; i < 500; ++i) {
    if (tx.exec_params("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)[0][0]
            .as<int>() == 0) {
      return;
    }
    std::this_thread::sleep_for(10ms);
  }
}

int backend_pid(pqxx::connection& conn) {
  pqxx::nontransaction tx(conn);
  return pg::exec(tx, kPid)[0][0].as<int>();
}

}  // namespace

TEST_CASE("a lock timeout is Unavailable, and its statement did not commit") {
  Table t;
  auto options = t.db.pool_options(1);
  options.lock_timeout = 100ms;
  pg::Pool pool(options);
  pqxx::connection holder(t.db.url());
  pqxx::work hold(holder);
  pg::exec(hold, kLockRow);
  auto conn = pool.acquire();
  pqxx::nontransaction tx(*conn);
  const auto e = unavailable_from([&] { pg::exec(tx, kUpdateRow, 1); });
  CHECK(e.details()["cause"] == "lock_timeout");
  CHECK(e.details()["sqlstate"] == "55P03");
  CHECK_FALSE(e.outcome_unknown());
  hold.commit();
  pqxx::nontransaction check(holder);
  CHECK(check.exec("SELECT v FROM t WHERE k = 1")[0][0].as<int>() == 0);
}

TEST_CASE("a deadlock victim's statement is Unavailable") {
  Table t;
  pg::Pool pool(t.db.pool_options(2));
  auto a = pool.acquire();
  auto b = pool.acquire();
  const int a_pid = backend_pid(*a);
  pg::Work ta(*a);
  pg::Work tb(*b);
  pg::exec(ta, kUpdateRow, 1);
  pg::exec(tb, kUpdateRow, 2);
  // a waits for b's row first; b then waits for a's: the first to wait detects the cycle.
  std::thread waiter([&] {
    try {
      pg::exec(ta, kUpdateRow, 2);
    } catch (const Unavailable& e) {
      CHECK(e.details()["cause"] == "deadlock");
      CHECK_FALSE(e.outcome_unknown());
      return;
    }
    FAIL("a's statement was expected to be the deadlock's victim");
  });
  // b closes the cycle only once a waits (deadlock_timeout is 1 s: a's check runs first).
  pqxx::connection watcher(t.db.url());
  for (int i = 0; i < 1000; ++i) {
    pqxx::nontransaction w(watcher);
    if (w.exec_params("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 "
                      "AND wait_event_type = 'Lock'",
                      a_pid)[0][0]
            .as<int>() == 1) {
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  CHECK_NOTHROW(pg::exec(tb, kUpdateRow, 1));
  waiter.join();
  tb.commit();
}

TEST_CASE("a statement timeout is Unavailable") {
  Table t;
  auto options = t.db.pool_options(1);
  options.settings.push_back({"statement_timeout", "50ms"});
  pg::Pool pool(options);
  auto conn = pool.acquire();
  pqxx::nontransaction tx(*conn);
  const auto e = unavailable_from([&] { pg::exec(tx, kSleep, 5.0); });
  CHECK(e.details()["cause"] == "statement_timeout");
  CHECK(e.details()["sqlstate"] == "57014");
}

TEST_CASE(
    "a session ended by the server: unknown outcome for an autocommit write, known in a "
    "transaction") {
  Table t;
  pg::Pool pool(t.db.pool_options(2));
  {
    auto conn = pool.acquire();
    terminate_backend(t.db.url(), backend_pid(*conn));  // admin shutdown of this session (57P01)
    pqxx::nontransaction tx(*conn);
    const auto e = unavailable_from([&] { pg::exec(tx, kUpdateRow, 1); });
    CHECK(e.details()["cause"] == "connection_lost");
    CHECK(e.outcome_unknown());  // it could have committed just before the session went
  }
  {
    auto conn = pool.acquire();
    const int pid = backend_pid(*conn);
    pg::Work tx(*conn);
    pg::exec(tx, kOne);
    terminate_backend(t.db.url(), pid);
    const auto e = unavailable_from([&] { pg::exec(tx, kUpdateRow, 1); });
    CHECK(e.details()["cause"] == "connection_lost");
    CHECK_FALSE(e.outcome_unknown());  // an open transaction dies with its session
  }
}

TEST_CASE("a commit whose session is lost is Unavailable with an unknown outcome") {
  Table t;
  pg::Pool pool(t.db.pool_options(1));
  auto conn = pool.acquire();
  const int pid = backend_pid(*conn);
  pg::Work tx(*conn);
  pg::exec(tx, kUpdateRow, 1);
  terminate_backend(t.db.url(), pid);
  const auto e = unavailable_from([&] { tx.commit(); });
  CHECK(e.outcome_unknown());
}

TEST_CASE("a session idle in a transaction past the timeout is Unavailable at its next statement") {
  Table t;
  auto options = t.db.pool_options(1);
  options.idle_in_transaction_timeout = 100ms;
  pg::Pool pool(options);
  auto conn = pool.acquire();
  const int pid = backend_pid(*conn);
  pg::Work tx(*conn);
  pg::exec(tx, kOne);
  // The server ends the session (25P03, FATAL) once the timer fires.
  pqxx::connection watcher(t.db.url());
  for (int i = 0; i < 500; ++i) {
    pqxx::nontransaction w(watcher);
    if (w.exec_params("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)[0][0]
            .as<int>() == 0) {
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  const auto e = unavailable_from([&] { pg::exec(tx, kOne); });
  CHECK(e.details()["cause"] == "connection_lost");
}

TEST_CASE("a refused connection is Unavailable") {
  pg::Pool::Options options;
  options.url = "postgresql://127.0.0.1:1/nothing?connect_timeout=2";
  pg::Pool pool(options);
  const auto e = unavailable_from([&] { pool.acquire(); });
  CHECK(e.details()["cause"] == "connection_lost");
  CHECK_FALSE(e.outcome_unknown());
}

TEST_CASE("an SQL error that is the caller's passes through unclassified") {
  Table t;
  pg::Pool pool(t.db.pool_options(1));
  auto conn = pool.acquire();
  pqxx::nontransaction tx(*conn);
  CHECK_THROWS_AS(pg::exec(tx, kInsert, 1), pqxx::unique_violation);
  constexpr pg::Statement kBad{"test_bad", "SELECT no_such_column FROM t"};
  CHECK_THROWS_AS(pg::exec(tx, kBad), pqxx::undefined_column);
  try {
    pg::exec(tx, kInsert, 2);
  } catch (const std::exception& e) {
    CHECK_FALSE(pg::classify(e, pg::Phase::autocommit).has_value());
  }
}

TEST_CASE("the backoff doubles up to its ceiling, with jitter below it") {
  pg::Backoff b{100ms, 1'000ms, 5};
  for (int i = 0; i < 200; ++i) {
    const auto first = b.delay(1);
    CHECK(first >= 50ms);
    CHECK(first <= 100ms);
    const auto third = b.delay(3);
    CHECK(third >= 200ms);
    CHECK(third <= 400ms);
    const auto late = b.delay(30);
    CHECK(late >= 500ms);
    CHECK(late <= 1'000ms);
  }
}

TEST_CASE("retry_unavailable repeats until success, a limit, or keep_trying says no") {
  pg::Backoff quick{1ms, 2ms, 4};
  int calls = 0;
  CHECK(pg::retry_unavailable(quick, [&] {
          if (++calls < 3) throw Unavailable("not yet");
          return 7;
        }) == 7);
  CHECK(calls == 3);

  calls = 0;
  CHECK_THROWS_AS(pg::retry_unavailable(quick,
                                        [&]() -> int {
                                          ++calls;
                                          throw Unavailable("never");
                                        }),
                  Unavailable);
  CHECK(calls == 4);

  calls = 0;
  CHECK_THROWS_AS(pg::retry_unavailable(
                      quick,
                      [&]() -> int {
                        ++calls;
                        throw Unavailable("never");
                      },
                      [&] { return calls < 2; }),
                  Unavailable);
  CHECK(calls == 2);

  calls = 0;  // anything but Unavailable is not retried
  CHECK_THROWS_AS(pg::retry_unavailable(quick,
                                        [&]() -> int {
                                          ++calls;
                                          throw Conflict("no");
                                        }),
                  Conflict);
  CHECK(calls == 1);
}
