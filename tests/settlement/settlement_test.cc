// Invariant 4, "never repeat an unsafe effect": at resume, pure and idempotent calls in flight
// re-run, unsafe ones get a synthetic result, missing tool_results are appended, never-started
// calls run; each records its rule.
#include <map>

#include "errors/errors.h"
#include "settlement/settlement.h"
#include "tests/transcript/transcript_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using settlement::EffectClass;
using settlement::Rule;
using transcript::EntryKind;
using transcript::StepOutcome;
using transcript::StepState;
using namespace std::chrono_literals;

namespace {

// A bot for tests: turns are JSON {"calls": [{"id", "tool", "args"}]}; tools count their runs.
struct TestBot {
  std::map<std::string, int> runs;  // tool -> times run
  std::vector<settlement::ToolContext> contexts;

  settlement::Callbacks callbacks() {
    return {
        [](std::string_view turn) {
          std::vector<settlement::ToolCall> calls;
          const auto parsed = nlohmann::json::parse(turn);
          for (const auto& c : parsed["calls"]) {
            calls.push_back({c["id"], c["tool"], c["args"]});
          }
          return calls;
        },
        [this](const settlement::ToolCall& call, const settlement::ToolContext& ctx) {
          ++runs[call.tool];
          contexts.push_back(ctx);
          return StepOutcome::success("ran " + call.tool);
        },
        [](const settlement::ToolCall& call, const StepOutcome& outcome) {
          return "result of " + call.call_id + ": " + outcome.result + outcome.error;
        },
    };
  }
};

std::string turn(const std::vector<std::pair<std::string, std::string>>& calls) {
  nlohmann::json j = {{"calls", nlohmann::json::array()}};
  for (const auto& [id, tool] : calls) {
    j["calls"].push_back({{"id", id}, {"tool", tool}, {"args", {{"path", "x"}}}});
  }
  return j.dump();
}

transcript::StepIntent call(std::int64_t step, const std::string& id, const std::string& tool) {
  return {StepNo(step), tool, id, {{"path", "x"}}};
}

struct SettlementFixture : TranscriptFixture {
  SettlementFixture() : TranscriptFixture(short_lease()) {}
  static ledger::Options short_lease() {
    ledger::Options o;
    o.lease_ttl = 1s;
    return o;
  }
  // The dead predecessor's lease lapses and bot-2 takes the run over.
  ledger::Claim take_over(const RunId& run) {
    db.advance_clock(2s);
    return ledger.claim(make_owner("bot-2"), run);
  }
  settlement::Settler settler{
      ledger, store,
      settlement::EffectClasses::parse("pure: read_file grep_*\n"
                                       "idempotent: write_file submit_*\n")};
  TestBot bot;
};

}  // namespace

TEST_CASE("effect classes come from glob patterns and anything unlisted is unsafe") {
  const auto classes = settlement::EffectClasses::parse(
      "# tools\npure: read_file grep_*   # read-only\nidempotent: write_file submit_?r\n\n");
  CHECK(classes.classify("read_file") == EffectClass::pure);
  CHECK(classes.classify("grep_repo") == EffectClass::pure);
  CHECK(classes.classify("write_file") == EffectClass::idempotent);
  CHECK(classes.classify("submit_pr") == EffectClass::idempotent);
  CHECK(classes.classify("submit_review") == EffectClass::unsafe);
  CHECK(classes.classify("bash") == EffectClass::unsafe);
  CHECK(classes.classify("git_push") == EffectClass::unsafe);
  CHECK(settlement::EffectClasses().classify("read_file") == EffectClass::unsafe);
  CHECK_THROWS_AS(settlement::EffectClasses::parse("pure: a\nsafe: b\n"), InvalidArgument);
  CHECK(settlement::glob_match("*", ""));
  CHECK(settlement::glob_match("a*b*c", "aXXbYc"));
  CHECK_FALSE(settlement::glob_match("a*b", "aXXbc"));
}

TEST_CASE("settle re-runs pure and idempotent calls in flight under the new generation") {
  SettlementFixture f;
  const auto first = f.claimed_run("r");
  const RunId run = first.run.run_id;
  f.store.append_turn(run, first.run.generation, turn({{"c1", "read_file"}, {"c2", "write_file"}}),
                      {call(1, "c1", "read_file"), call(2, "c2", "write_file")});
  const auto second = f.take_over(run);
  REQUIRE(second.taken_over);
  const auto resume = f.settler.settle(second, f.bot.callbacks());
  CHECK_FALSE(resume.interrupted);
  CHECK(f.bot.runs["read_file"] == 1);
  CHECK(f.bot.runs["write_file"] == 1);
  REQUIRE(resume.settled.size() == 2);
  CHECK(resume.settled[0].rule == Rule::rerun_pure);
  CHECK(resume.settled[1].rule == Rule::rerun_idempotent);
  const auto steps = f.store.steps(run);
  CHECK(steps[0].state == StepState::done);
  CHECK(steps[0].intent_generation == first.run.generation);
  CHECK(steps[0].result_generation == second.run.generation);
  CHECK(steps[0].settlement["rule"] == "rerun_pure");
  CHECK(steps[0].settlement["generation"] == second.run.generation.value());
  // The re-run got the step's own effect key and the new generation.
  CHECK(f.bot.contexts[0].effect_key == run.value() + "/1");
  CHECK(f.bot.contexts[0].generation == second.run.generation);
  CHECK(resume.turn == 1);
  CHECK(resume.next_step == StepNo(3));
  CHECK(f.store.verify(run).ok);
}

TEST_CASE("settle never re-runs an unsafe or unknown call: it gets a synthetic result") {
  SettlementFixture f;
  const auto first = f.claimed_run("r");
  const RunId run = first.run.run_id;
  f.store.append_turn(run, first.run.generation, turn({{"c1", "bash"}, {"c2", "deploy_prod"}}),
                      {call(1, "c1", "bash"), call(2, "c2", "deploy_prod")});
  const auto second = f.take_over(run);
  const auto resume = f.settler.settle(second, f.bot.callbacks());
  CHECK(f.bot.runs.empty());
  REQUIRE(resume.settled.size() == 2);
  CHECK(resume.settled[0].rule == Rule::synthetic_unsafe);
  const auto steps = f.store.steps(run);
  CHECK(steps[0].state == StepState::settled);
  const std::string message = *steps[0].result;
  CHECK(message.find("restarted") != std::string::npos);
  CHECK(message.find("`bash`") != std::string::npos);
  CHECK(message.find("c1") != std::string::npos);
  CHECK(message.find(run.value() + "/1") != std::string::npos);
  CHECK(steps[1].settlement["effect_class"] == "unsafe");
  CHECK(f.store.last_entry(run, EntryKind::tool_result)->body ==
        "result of c2: " + *steps[1].result);
}

TEST_CASE("settle appends a missing tool_result without re-running the call") {
  SettlementFixture f;
  const auto first = f.claimed_run("r");
  const RunId run = first.run.run_id;
  f.store.append_turn(run, first.run.generation, turn({{"c1", "bash"}}), {call(1, "c1", "bash")});
  f.store.complete_step(run, first.run.generation, StepNo(1), StepOutcome::success("pushed"));
  const auto second = f.take_over(run);
  const auto resume = f.settler.settle(second, f.bot.callbacks());
  CHECK(f.bot.runs.empty());
  REQUIRE(resume.settled.size() == 1);
  CHECK(resume.settled[0].rule == Rule::append_missing_result);
  const auto steps = f.store.steps(run);
  CHECK(steps[0].state == StepState::done);
  CHECK(steps[0].result_generation == first.run.generation);  // the result stays the original's
  CHECK(steps[0].result_seq == 2);
  CHECK(f.store.last_entry(run, EntryKind::tool_result)->body == "result of c1: pushed");
}

TEST_CASE("settle runs a call of the last turn that never got an intent") {
  SettlementFixture f;
  const auto first = f.claimed_run("r");
  const RunId run = first.run.run_id;
  // The turn asked for two calls; the process died after the first's intent was written.
  f.store.append(run, first.run.generation, EntryKind::assistant,
                 turn({{"c1", "read_file"}, {"c2", "bash"}}));
  f.store.begin_step(run, first.run.generation, call(1, "c1", "read_file"));
  const auto second = f.take_over(run);
  const auto resume = f.settler.settle(second, f.bot.callbacks());
  REQUIRE(resume.settled.size() == 2);
  CHECK(resume.settled[0].rule == Rule::rerun_pure);
  CHECK(resume.settled[1].rule == Rule::run_never_started);
  CHECK(resume.settled[1].step == StepNo(2));
  CHECK(f.bot.runs["bash"] == 1);  // never started, so it runs, unsafe or not
  const auto steps = f.store.steps(run);
  REQUIRE(steps.size() == 2);
  CHECK(steps[1].call_id == "c2");
  CHECK(steps[1].intent_generation == second.run.generation);
  CHECK(steps[1].settlement["rule"] == "run_never_started");
  CHECK(resume.next_step == StepNo(3));
}

TEST_CASE("a settled run settles to nothing the next time") {
  SettlementFixture f;
  const auto first = f.claimed_run("r");
  const RunId run = first.run.run_id;
  f.store.append_turn(run, first.run.generation, turn({{"c1", "bash"}}), {call(1, "c1", "bash")});
  const auto second = f.take_over(run);
  f.settler.settle(second, f.bot.callbacks());
  const auto third = f.take_over(run);
  CHECK(f.settler.settle(third, f.bot.callbacks()).settled.empty());
}

TEST_CASE("a run taken over K times without progress is finished interrupted, announced") {
  SettlementFixture f;
  auto r = request("stuck");
  r.parent_instance = "wf-stuck";
  const RunId run = f.ledger.dispatch(r).run.run_id;
  f.ledger.claim(f.owner, run);        // generation 1: never completes a step
  ledger::Claim c = f.take_over(run);  // 2
  CHECK_FALSE(f.settler.settle(c, f.bot.callbacks()).interrupted);
  c = f.take_over(run);  // 3
  CHECK_FALSE(f.settler.settle(c, f.bot.callbacks()).interrupted);
  c = f.take_over(run);  // 4: three claims since generation 1
  CHECK(f.settler.settle(c, f.bot.callbacks()).interrupted);
  const auto after = f.ledger.get(run);
  CHECK(after.status == ledger::RunStatus::interrupted);
  CHECK(after.result["error"] == "stalled");
  CHECK(f.sql("SELECT count(*) FROM wf_events WHERE instance_id = 'wf-stuck'")[0][0].as<int>() ==
        1);
}

TEST_CASE("settlement by a generation that lost the run is fenced") {
  SettlementFixture f;
  const auto first = f.claimed_run("r");
  const RunId run = first.run.run_id;
  f.store.append_turn(run, first.run.generation, turn({{"c1", "bash"}}), {call(1, "c1", "bash")});
  const auto second = f.take_over(run);
  f.take_over(run);  // a third process took it before the second settled
  CHECK_THROWS_AS(f.settler.settle(second, f.bot.callbacks()), FencedError);
  CHECK(f.store.steps(run)[0].state == StepState::intent);
}
