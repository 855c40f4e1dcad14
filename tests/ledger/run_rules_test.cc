// The rules of a live_runs row (migration 0012 moved them from CHECK constraints to a trigger on
// the columns they govern) and the test clock (migrations/test_clock/test_clock.h; a production
// database has none: tests/migrations).
#include "tests/ledger/ledger_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;

namespace {

// The constraint named by the check_violation `statement` raises ("" when it succeeds).
std::string violated_rule(const LedgerFixture& f, const std::string& statement) {
  try {
    f.sql(statement);
  } catch (const pqxx::check_violation& e) {
    const std::string what = e.what();
    const auto open = what.find("check constraint \"");
    if (open == std::string::npos) return "?";
    const auto start = open + std::string("check constraint \"").size();
    return what.substr(start, what.find('"', start) - start);
  }
  return "";
}

}  // namespace

TEST_CASE("the database refuses a run row that breaks a lifecycle rule, naming the rule") {
  LedgerFixture f;
  const std::string id = f.dispatch("1").value();
  const std::string where = " WHERE run_id = '" + id + "'";
  CHECK(violated_rule(f, "UPDATE live_runs SET status = 'running'" + where) ==
        "running_has_owner_and_lease");
  CHECK(violated_rule(f, "UPDATE live_runs SET lease_expires_at = now()" + where) ==
        "queued_has_no_lease");
  CHECK(violated_rule(f, "UPDATE live_runs SET status = 'finished'" + where) ==
        "terminal_has_finished_at");
  CHECK(violated_rule(f, "UPDATE live_runs SET finished_at = now()" + where) ==
        "terminal_has_finished_at");
  CHECK(violated_rule(f, "UPDATE live_runs SET status = 'lost'" + where) ==
        "live_runs_status_check");
  CHECK(violated_rule(f, "UPDATE live_runs SET profile = '[]'" + where) ==
        "live_runs_profile_check");
  CHECK(violated_rule(f, "UPDATE live_runs SET budget_max_steps = 0" + where) ==
        "live_runs_budget_max_steps_check");
  CHECK(violated_rule(f,
                      "INSERT INTO live_runs (dispatch_key, thread_key, requester, depth, "
                      "budget_wall_s, budget_max_steps) VALUES ('k', 't', 'r', -1, 1, 1)") ==
        "live_runs_depth_check");
  CHECK(violated_rule(f,
                      "INSERT INTO live_runs (dispatch_key, thread_key, requester, "
                      "budget_wall_s, budget_max_steps) VALUES ('k', 't', 'r', 0, 1)") ==
        "live_runs_budget_wall_s_check");
  // A whole lifecycle write that keeps the rules passes.
  CHECK(violated_rule(
            f, "UPDATE live_runs SET status = 'cancelled', finished_at = now()" + where) == "");
}

TEST_CASE("runledger_now() moves forward with the test clock, and only forward") {
  LedgerFixture f;
  const auto skew_s = [&] {
    return f.sql("SELECT extract(epoch FROM runledger_now() - now())")[0][0].as<double>();
  };
  CHECK(skew_s() == 0.0);
  f.db.advance_clock(90s);
  CHECK(skew_s() == Approx(90.0));
  f.db.advance_clock(1500ms);
  CHECK(skew_s() == Approx(91.5));
  CHECK_THROWS_AS(f.sql("SELECT runledger_move_clock(-1)"), pqxx::data_exception);
  CHECK(skew_s() == Approx(91.5));
}
