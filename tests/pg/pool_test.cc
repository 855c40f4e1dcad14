#include <catch2/catch.hpp>

#include <thread>

#include "errors/errors.h"
#include "pg/pg.h"
#include "tests/support/test_database.h"

using namespace runledger;
using namespace std::chrono_literals;

namespace {
std::string show(pqxx::connection& conn, const std::string& setting) {
  pqxx::nontransaction tx(conn);
  return tx.exec("SHOW " + setting)[0][0].as<std::string>();
}
}  // namespace

TEST_CASE("every pooled session carries the runtime timeouts and UTC") {
  testing::TestDatabase db;
  auto options = db.pool_options(2);
  options.lock_timeout = 1500ms;
  options.idle_in_transaction_timeout = 20s;
  pg::Pool pool(options);
  auto conn = pool.acquire();
  CHECK(show(*conn, "lock_timeout") == "1500ms");
  CHECK(show(*conn, "idle_in_transaction_session_timeout") == "20s");
  CHECK(show(*conn, "TimeZone") == "UTC");
}

TEST_CASE("the pool hands out at most size connections and times out waiting") {
  testing::TestDatabase db;
  auto options = db.pool_options(2);
  options.acquire_timeout = 100ms;
  pg::Pool pool(options);
  auto a = pool.acquire();
  {
    auto b = pool.acquire();
    CHECK_THROWS_AS(pool.acquire(), Unavailable);
  }
  auto c = pool.acquire();  // b came back
  CHECK(c->is_open());
}

TEST_CASE("a session idle inside a transaction past the timeout is ended by the server") {
  testing::TestDatabase db;
  auto options = db.pool_options(1);
  options.idle_in_transaction_timeout = 200ms;
  pg::Pool pool(options);
  auto conn = pool.acquire();
  pqxx::work tx(*conn);
  tx.exec("SELECT 1");
  std::this_thread::sleep_for(600ms);  // the thing under test is a server-side timer
  CHECK_THROWS(tx.exec("SELECT 1"));
}

TEST_CASE("named statements prepare once per connection and run with parameters") {
  testing::TestDatabase db;
  pg::Pool pool(db.pool_options(1));
  constexpr pg::Statement kAdd{"test_add", "SELECT $1::int + $2::int"};
  for (int i = 0; i < 3; ++i) {
    auto conn = pool.acquire();
    pqxx::nontransaction tx(*conn);
    CHECK(pg::exec(tx, kAdd, i, 40)[0][0].as<int>() == 40 + i);
  }
}

TEST_CASE("ping answers on a live database and is Unavailable where no server listens") {
  testing::TestDatabase db;
  pg::Pool live(db.pool_options(1));
  CHECK_NOTHROW(live.ping());
  pg::Pool nowhere("postgresql://127.0.0.1:1/none?connect_timeout=2", 1);
  CHECK_THROWS_AS(nowhere.ping(), Unavailable);
}
