#include <catch2/catch.hpp>

#include <thread>

#include "errors/errors.h"
#include "migrations/migrations.h"
#include "migrations/test_clock/test_clock.h"
#include "tests/support/empty_database.h"

using namespace runledger;
using namespace runledger::testing;

namespace {

int count(const std::string& url, const std::string& query) {
  pqxx::connection conn(url);
  pqxx::nontransaction tx(conn);
  return tx.exec(query)[0][0].as<int>();
}

}  // namespace

TEST_CASE("migrations are compiled in, numbered from 1 without gaps, with checksums") {
  const auto& all = migrations::all();
  REQUIRE_FALSE(all.empty());
  for (std::size_t i = 0; i < all.size(); ++i) {
    CHECK(all[i].version == static_cast<int>(i) + 1);
    CHECK(all[i].sha256.size() == 64);
    CHECK_FALSE(all[i].sql.empty());
  }
  CHECK(all[0].name == "0001_ledger");
}

TEST_CASE("apply applies every migration once and a second apply does nothing") {
  EmptyDatabase db;
  const auto first = migrations::apply(db.url());
  CHECK(first.size() == migrations::all().size());
  CHECK(migrations::apply(db.url()).empty());
  CHECK(migrations::applied(db.url()).size() == migrations::all().size());
  CHECK(count(db.url(), "SELECT count(*) FROM live_runs") == 0);
}

TEST_CASE("processes applying at once apply each migration exactly once") {
  EmptyDatabase db;
  std::vector<std::thread> threads;
  std::vector<std::size_t> applied(4);
  std::vector<std::string> errors(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      try {
        applied[i] = migrations::apply(db.url()).size();
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) CHECK(e.empty());
  std::size_t total = 0;
  for (auto n : applied) total += n;
  CHECK(total == migrations::all().size());
}

TEST_CASE("an applied migration whose file changed is a Conflict and nothing is applied") {
  TestDatabase db;  // migrated from the template
  {
    pqxx::connection conn(db.url());
    pqxx::nontransaction tx(conn);
    tx.exec("UPDATE runledger_migrations SET sha256 = repeat('0', 64) WHERE version = 1");
  }
  try {
    migrations::apply(db.url());
    FAIL("expected a Conflict");
  } catch (const Conflict& e) {
    CHECK(std::string(e.what()).find("0001_ledger was changed") != std::string::npos);
  }
}

TEST_CASE("a database newer than the code is a Conflict") {
  TestDatabase db;
  {
    pqxx::connection conn(db.url());
    pqxx::nontransaction tx(conn);
    tx.exec(
        "INSERT INTO runledger_migrations (version, name, sha256) "
        "VALUES (9999, '9999_future', repeat('a', 64))");
  }
  CHECK_THROWS_AS(migrations::apply(db.url()), Conflict);
}

TEST_CASE("a failing migration leaves no record and no partial schema") {
  // Runs the real runner against a database where 0001's first table already exists, so 0001
  // fails half-way: its transaction must roll back whole.
  EmptyDatabase db;
  {
    pqxx::connection conn(db.url());
    pqxx::nontransaction tx(conn);
    tx.exec("CREATE TABLE wf_events (x int)");
  }
  CHECK_THROWS(migrations::apply(db.url()));
  CHECK(migrations::applied(db.url()).empty());
  CHECK(count(db.url(), "SELECT count(*) FROM pg_tables WHERE tablename = 'live_runs'") == 0);
}

TEST_CASE("a database migrated the production way has no way to move its clock") {
  ProductionDatabase db;
  pqxx::connection conn(db.url());
  CHECK_FALSE(migrations::has_test_clock(conn));
  {
    pqxx::nontransaction tx(conn);
    CHECK_THROWS_AS(tx.exec("SELECT runledger_move_clock(60000)"), pqxx::undefined_function);
  }
  pqxx::work tx(conn);
  // Nothing a clock ever read is left: no skew sequence, no clock table, no clock function.
  CHECK(tx.exec("SELECT to_regclass('runledger_clock_skew_us')")[0][0].is_null());
  CHECK(tx.exec("SELECT to_regclass('runledger_clock')")[0][0].is_null());
  CHECK(tx.exec("SELECT count(*) FROM pg_proc WHERE proname LIKE '%clock%' "
                "AND pronamespace = 'public'::regnamespace")[0][0]
            .as<int>() == 0);
  // runledger_now() is now(), with the properties the hot statements were measured with
  // (PL/pgSQL, STABLE, PARALLEL SAFE, no arguments), and reads nothing else.
  const auto fn = tx.exec(R"sql(
    SELECT l.lanname, p.provolatile, p.proparallel,
           p.prosrc ~ '^\s*BEGIN\s+RETURN\s+now\(\);\s*END\s*$'
    FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.proname = 'runledger_now')sql");
  REQUIRE(fn.size() == 1);
  CHECK(fn[0][0].as<std::string>() == "plpgsql");
  CHECK(fn[0][1].as<std::string>() == "s");
  CHECK(fn[0][2].as<std::string>() == "s");
  CHECK(fn[0][3].as<bool>());
  CHECK(tx.exec("SELECT runledger_now() = now()")[0][0].as<bool>());
  // Every sequence of the database moved to its end changes nothing.
  tx.exec(
      "SELECT setval(format('%I.%I', schemaname, sequencename)::regclass, max_value) "
      "FROM pg_sequences");
  CHECK(tx.exec("SELECT runledger_now() = now()")[0][0].as<bool>());
}
