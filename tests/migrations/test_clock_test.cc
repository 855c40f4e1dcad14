// The movable test clock (migrations/test_clock/test_clock.h): only into a test database migrated
// by this build, installed again without losing the time moved, and never silently stuck.
#include <catch2/catch.hpp>

#include "errors/errors.h"
#include "migrations/migrations.h"
#include "migrations/test_clock/test_clock.h"
#include "tests/support/empty_database.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;

namespace {

void exec(const std::string& url, const std::string& statement) {
  pqxx::connection conn(url);
  pqxx::nontransaction tx(conn);
  tx.exec(statement);
}

double skew_s(const std::string& url) {
  pqxx::connection conn(url);
  pqxx::nontransaction tx(conn);
  return tx.exec("SELECT extract(epoch FROM runledger_now() - now())")[0][0].as<double>();
}

void install(const std::string& url) {
  pqxx::connection conn(url);
  migrations::install_test_clock(conn);
}

bool has_clock(const std::string& url) {
  pqxx::connection conn(url);
  return migrations::has_test_clock(conn);
}

void move_clock(const std::string& url, std::int64_t ms) {
  exec(url, "SELECT runledger_move_clock(" + std::to_string(ms) + ")");
}

const std::string kRun =
    "INSERT INTO live_runs (dispatch_key, thread_key, requester, budget_wall_s, "
    "budget_max_steps) VALUES ('k', 't', 'r', 60, 10)";
const std::string kInstance =
    "INSERT INTO wf_instances (instance_id, workflow, version, input, deadline_at) "
    "VALUES ('i-1', 'w', 1, '{}', now() + interval '1 hour')";

}  // namespace

TEST_CASE("the test clock goes only on a database migrated by this build") {
  EmptyDatabase empty;
  CHECK_THROWS_AS(install(empty.url()), Conflict);
  CHECK_FALSE(has_clock(empty.url()));

  ProductionDatabase db;
  const std::string record = "INSERT INTO runledger_migrations (version, name, sha256) ";
  const auto& latest = migrations::all().back();
  exec(db.url(), "DELETE FROM runledger_migrations WHERE version = " +
                     std::to_string(latest.version));  // one migration behind
  CHECK_THROWS_AS(install(db.url()), Conflict);
  exec(db.url(), record + "VALUES (" + std::to_string(latest.version) + ", '" + latest.name +
                     "', '" + latest.sha256 + "')");
  exec(db.url(), record + "VALUES (9999, '9999_future', repeat('a', 64))");
  CHECK_THROWS_AS(install(db.url()), Conflict);  // newer than this build
  CHECK_FALSE(has_clock(db.url()));
  exec(db.url(), "DELETE FROM runledger_migrations WHERE version = 9999");
  install(db.url());
  CHECK(has_clock(db.url()));
}

TEST_CASE("the test clock refuses a database in use, unless the database already has it") {
  for (const auto& row : {kRun, kInstance}) {
    ProductionDatabase db;
    exec(db.url(), row);
    try {
      install(db.url());
      FAIL("expected a Conflict");
    } catch (const Conflict& e) {
      CHECK(std::string(e.what()).find("not a test database") != std::string::npos);
    }
    CHECK_FALSE(has_clock(db.url()));
    CHECK(skew_s(db.url()) == 0.0);
  }
  TestDatabase test_db;  // cloned from the template, which has the clock
  exec(test_db.url(), kRun);
  exec(test_db.url(), kInstance);
  install(test_db.url());
  CHECK(has_clock(test_db.url()));
}

TEST_CASE("installing the test clock again and migrating keep the time moved") {
  TestDatabase db;
  db.advance_clock(5s);
  CHECK(migrations::apply(db.url()).empty());  // what every runledger process does at start
  CHECK(skew_s(db.url()) == Approx(5.0));
  install(db.url());
  CHECK(skew_s(db.url()) == Approx(5.0));
  db.advance_clock(1s);
  CHECK(skew_s(db.url()) == Approx(6.0));
}

TEST_CASE("a test clock that a migration replaced refuses to move until it is installed again") {
  TestDatabase db;
  db.advance_clock(1s);
  // What a later migration redefining runledger_now() would do to a test database.
  exec(db.url(),
       "CREATE OR REPLACE FUNCTION runledger_now() RETURNS timestamptz "
       "LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$ BEGIN RETURN now(); END $$");
  try {
    move_clock(db.url(), 1000);
    FAIL("expected the move to be refused");
  } catch (const pqxx::sql_error& e) {
    CHECK(e.sqlstate() == "55000");  // object_not_in_prerequisite_state
  }
  install(db.url());
  CHECK(skew_s(db.url()) == Approx(1.0));  // the refused move left the skew alone
  move_clock(db.url(), 1000);
  CHECK(skew_s(db.url()) == Approx(2.0));
}
