// Invariant 3, "write-ahead": intents before tools, fenced, numbered across generations, within
// the run's budget; completions recorded once.
#include <future>

#include "errors/errors.h"
#include "failpoint/failpoint.h"
#include "tests/transcript/transcript_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using transcript::EntryKind;
using transcript::StepOutcome;
using transcript::StepState;
using namespace std::chrono_literals;

TEST_CASE("begin_step records the intent and returns the effect key run_id/step_no") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  const RunId run = c.run.run_id;
  const auto key = f.store.begin_step(run, c.run.generation, intent(1, "bash", {{"cmd", "make"}}));
  CHECK(key == run.value() + "/1");
  const auto steps = f.store.steps(run);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].state == StepState::intent);
  CHECK(steps[0].tool == "bash");
  CHECK(steps[0].call_id == "call-1");
  CHECK(steps[0].args["cmd"] == "make");
  CHECK(steps[0].intent_generation == c.run.generation);
  CHECK_FALSE(steps[0].result_generation.has_value());
  CHECK(f.store.next_step_no(run) == StepNo(2));
}

TEST_CASE(
    "a duplicate step_no is a Conflict, never an overwrite; the identical intent is a retry") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  const RunId run = c.run.run_id;
  const auto key = f.store.begin_step(run, c.run.generation, intent(1));
  CHECK(f.store.begin_step(run, c.run.generation, intent(1)) == key);
  auto other = intent(1, "git_push");
  other.call_id = "another";
  CHECK_THROWS_AS(f.store.begin_step(run, c.run.generation, other), Conflict);
  CHECK(f.store.steps(run)[0].tool == "bash");
}

TEST_CASE("completions: the identical one repeated is a no-op, a different one a Conflict") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  const RunId run = c.run.run_id;
  const Generation g = c.run.generation;
  f.store.begin_step(run, g, intent(1));
  f.store.begin_step(run, g, intent(2));
  const std::string output("out\0put", 7);
  f.store.complete_step(run, g, StepNo(1), StepOutcome::success(output));
  f.store.complete_step(run, g, StepNo(1), StepOutcome::success(output));
  CHECK_THROWS_AS(f.store.complete_step(run, g, StepNo(1), StepOutcome::success("else")), Conflict);
  CHECK_THROWS_AS(f.store.complete_step(run, g, StepNo(1), StepOutcome::failure("boom")), Conflict);
  f.store.complete_step(run, g, StepNo(2), StepOutcome::failure("exit 1"));
  CHECK_THROWS_AS(f.store.complete_step(run, g, StepNo(3), StepOutcome::success("x")), NotFound);
  const auto steps = f.store.steps(run);
  CHECK(steps[0].state == StepState::done);
  CHECK(steps[0].result == output);
  CHECK(steps[0].result_generation == g);
  CHECK(steps[1].state == StepState::failed);
  CHECK(steps[1].error == "exit 1");
}

TEST_CASE("a successor completes an old intent under its own generation and numbers on") {
  ledger::Options o;
  o.lease_ttl = 1s;
  TranscriptFixture f(o);
  const auto first = f.claimed_run("r");
  const RunId run = first.run.run_id;
  f.store.begin_step(run, first.run.generation, intent(1, "read_file"));
  f.db.advance_clock(2s);
  const auto second = f.ledger.claim(make_owner("bot-2"), run);
  // The old owner can neither complete nor begin anything any more.
  CHECK_THROWS_AS(
      f.store.complete_step(run, first.run.generation, StepNo(1), StepOutcome::success("x")),
      FencedError);
  CHECK_THROWS_AS(f.store.begin_step(run, first.run.generation, intent(2)), FencedError);
  // The successor re-runs the pure step and records it as its own result.
  f.store.complete_step(run, second.run.generation, StepNo(1), StepOutcome::success("file"));
  CHECK(f.store.next_step_no(run) == StepNo(2));
  f.store.begin_step(run, second.run.generation, intent(2));
  const auto steps = f.store.steps(run);
  CHECK(steps[0].intent_generation == first.run.generation);
  CHECK(steps[0].result_generation == second.run.generation);
  CHECK(steps[1].intent_generation == second.run.generation);
  CHECK(steps[0].effect_key == run.value() + "/1");
}

TEST_CASE("an intent past max_steps is refused and the run is finished failed") {
  TranscriptFixture f;
  auto r = request("child");
  r.parent_instance = "wf-budget";
  r.budget = ledger::Budget{600, 2};
  const RunId run = f.ledger.dispatch(r).run.run_id;
  const auto c = f.ledger.claim(f.owner, run);
  f.store.begin_step(run, c.run.generation, intent(1));
  f.store.begin_step(run, c.run.generation, intent(2));
  try {
    f.store.begin_step(run, c.run.generation, intent(3));
    FAIL("expected BudgetExhausted");
  } catch (const BudgetExhausted& e) {
    CHECK(e.details()["limit"] == "max_steps");
  }
  const auto after = f.ledger.get(run);
  CHECK(after.status == ledger::RunStatus::failed);
  CHECK(after.result["error"] == "budget_exhausted");
  CHECK(f.store.steps(run).size() == 2);
  CHECK(f.sql("SELECT count(*) FROM wf_events WHERE instance_id = 'wf-budget'")[0][0].as<int>() ==
        1);
}

TEST_CASE("an intent after the wall-clock budget is refused and the run is finished failed") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r", ledger::Budget{60, 100});
  f.db.advance_clock(61s);
  try {
    f.store.append_turn(c.run.run_id, c.run.generation, "turn", {intent(1)});
    FAIL("expected BudgetExhausted");
  } catch (const BudgetExhausted& e) {
    CHECK(e.details()["limit"] == "wall_s");
  }
  CHECK(f.ledger.get(c.run.run_id).status == ledger::RunStatus::failed);
  CHECK(f.store.head(c.run.run_id).seq == 0);  // nothing of the refused turn was written
}

TEST_CASE("append_turn writes the assistant turn and its intents together, or nothing") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  const RunId run = c.run.run_id;
  const Generation g = c.run.generation;
  const auto written = f.store.append_turn(run, g, "assistant asks for two tools",
                                           {intent(1, "read_file"), intent(2, "bash")});
  CHECK(written.seq == 1);
  CHECK(written.effect_keys == std::vector<std::string>{run.value() + "/1", run.value() + "/2"});
  CHECK(f.store.steps(run).size() == 2);

  // A turn reusing step 2 is refused whole: no entry, no intent.
  CHECK_THROWS_AS(f.store.append_turn(run, g, "again", {intent(2), intent(3)}), Conflict);
  CHECK(f.store.head(run).seq == 1);
  CHECK(f.store.steps(run).size() == 2);

  const auto plain = f.store.append_turn(run, g, "final answer", {});
  CHECK(plain.seq == 2);
  CHECK(plain.effect_keys.empty());
  CHECK(f.store.verify(run).ok);
}

TEST_CASE("complete_with_result writes the completion and its tool_result together, once") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  const RunId run = c.run.run_id;
  const Generation g = c.run.generation;
  f.store.append_turn(run, g, "turn", {intent(1), intent(2)});
  f.store.complete_with_result(run, g, StepNo(1), StepOutcome::success("ok"), "tool says ok");
  f.store.complete_with_result(run, g, StepNo(1), StepOutcome::success("ok"), "tool says ok");
  CHECK(f.store.head(run).seq == 2);  // the repeat wrote nothing
  CHECK_THROWS_AS(f.store.complete_with_result(run, g, StepNo(1), StepOutcome::success("no"), "x"),
                  Conflict);
  f.store.complete_with_result(run, g, StepNo(2), StepOutcome::failure("exit 2"), "tool failed");
  std::vector<transcript::Entry> entries;
  f.store.read(run, 1, [&](const transcript::Entry& e) { entries.push_back(e); });
  REQUIRE(entries.size() == 3);
  CHECK(entries[1].kind == EntryKind::tool_result);
  CHECK(entries[1].body == "tool says ok");
  CHECK(entries[2].body == "tool failed");
  CHECK(f.store.verify(run).ok);
}

TEST_CASE("concurrent completions of one run's parallel tool calls all land") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  const RunId run = c.run.run_id;
  std::vector<transcript::StepIntent> intents;
  for (int i = 1; i <= 8; ++i) intents.push_back(intent(i));
  f.store.append_turn(run, c.run.generation, "turn", intents);
  std::vector<std::future<void>> done;
  for (int i = 1; i <= 8; ++i) {
    done.push_back(std::async(std::launch::async, [&, i] {
      f.store.complete_with_result(run, c.run.generation, StepNo(i),
                                   StepOutcome::success(std::to_string(i)),
                                   "result " + std::to_string(i));
    }));
  }
  std::vector<std::string> errors;
  for (auto& d : done) {
    try {
      d.get();
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
  }
  CHECK(errors.empty());
  CHECK(f.store.head(run).seq == 9);
  CHECK(f.store.verify(run).ok);
}

TEST_CASE("a claim that commits first refuses an in-flight intent and an in-flight append") {
  ledger::Options o;
  o.lease_ttl = 1s;
  TranscriptFixture f(o);
  const auto first = f.claimed_run("r");
  const RunId run = first.run.run_id;
  f.db.advance_clock(2s);
  failpoint::arm("ledger.claim.before_commit", failpoint::Action::pause);
  auto claimer =
      std::async(std::launch::async, [&] { return f.ledger.claim(make_owner("bot-2"), run); });
  REQUIRE(failpoint::wait_until_paused("ledger.claim.before_commit", 5s));
  auto intent_write = std::async(std::launch::async,
                                 [&] { f.store.begin_step(run, first.run.generation, intent(1)); });
  auto append_write = std::async(std::launch::async, [&] {
    f.store.append(run, first.run.generation, EntryKind::assistant, "stale");
  });
  // Both writes are blocked on the run row until the claim commits.
  const bool intent_waited = intent_write.wait_for(300ms) == std::future_status::timeout;
  const bool append_waited = append_write.wait_for(0ms) == std::future_status::timeout;
  failpoint::release("ledger.claim.before_commit");
  claimer.get();
  CHECK(intent_waited);
  CHECK(append_waited);
  CHECK_THROWS_AS(intent_write.get(), FencedError);
  CHECK_THROWS_AS(append_write.get(), FencedError);
  CHECK(f.store.steps(run).empty());
  CHECK(f.store.head(run).seq == 0);
}

TEST_CASE("a step records which entry carries its tool_result, written once") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  const RunId run = c.run.run_id;
  const Generation g = c.run.generation;
  f.store.append_turn(run, g, "turn", {intent(1), intent(2)});
  CHECK_THROWS_AS(f.store.append_tool_result(run, g, StepNo(1), "too early"), Conflict);
  f.store.complete_step(run, g, StepNo(1), StepOutcome::success("ok"));
  CHECK_FALSE(f.store.steps(run)[0].result_seq.has_value());  // the gap settlement looks for
  CHECK(f.store.append_tool_result(run, g, StepNo(1), "tool said ok",
                                   {{"rule", "append_missing_result"}}) == 2);
  CHECK_THROWS_AS(f.store.append_tool_result(run, g, StepNo(1), "twice"), Conflict);
  f.store.complete_with_result(run, g, StepNo(2), StepOutcome::settled("restarted; re-check"),
                               "synthetic", {{"rule", "synthetic_unsafe"}});
  const auto steps = f.store.steps(run);
  CHECK(steps[0].result_seq == 2);
  CHECK(steps[0].settlement["rule"] == "append_missing_result");
  CHECK(steps[1].result_seq == 3);
  CHECK(steps[1].state == StepState::settled);
  CHECK(steps[1].result == "restarted; re-check");
  CHECK(steps[1].settlement["rule"] == "synthetic_unsafe");
  CHECK(f.store.last_entry(run, EntryKind::tool_result)->body == "synthetic");
  CHECK(f.store.count_entries(run, EntryKind::assistant) == 1);
  CHECK_FALSE(f.store.last_entry(run, EntryKind::user).has_value());
  CHECK(f.store.verify(run).ok);
}
