// The transcript's reads for a dashboard: a run's transcript summary and its step timeline.
#include "errors/errors.h"
#include "tests/support/pages.h"
#include "tests/transcript/transcript_fixture.h"
#include "transcript/statements.h"  // private: the plan of the timeline's statement

using namespace runledger;
using namespace runledger::testing;
using transcript::EntryKind;
using transcript::StepOutcome;
using transcript::StepState;

namespace {

std::int64_t step_no_of(const transcript::TimelineStep& step) {
  return step.step_no.value();
}

std::vector<std::int64_t> one_to(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 1; i <= n; ++i) out.push_back(i);
  return out;
}

}  // namespace

TEST_CASE("summary counts a run's entries and their bytes, with the head, reading no body") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  const RunId run = c.run.run_id;
  const auto empty = f.store.summary(run);
  CHECK(empty.entries == 0);
  CHECK(empty.bytes == 0);
  CHECK(empty.head.seq == 0);

  f.store.append(run, c.run.generation, EntryKind::user, "hello");
  f.store.append(run, c.run.generation, EntryKind::assistant, std::string("\0\xff", 2));
  // Stored out of line (TOAST): counted by size all the same.
  f.store.append(run, c.run.generation, EntryKind::tool_result, random_bytes(3 << 20, 7));
  const auto summary = f.store.summary(run);
  CHECK(summary.entries == 3);
  CHECK(summary.bytes == 5 + 2 + (3 << 20));
  const auto head = f.store.head(run);
  CHECK(summary.head.seq == 3);
  CHECK(summary.head.seq == head.seq);
  CHECK(summary.head.sha256 == head.sha256);

  CHECK_THROWS_AS(f.store.summary(RunId(random_uuid())), NotFound);
}

TEST_CASE("step_timeline lists a run's steps in step order with their state and times") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  const RunId run = c.run.run_id;
  const Generation g = c.run.generation;
  f.store.append_turn(run, g, "turn", {intent(1, "read_file"), intent(2), intent(3, "git_push")});
  f.store.complete_with_result(run, g, StepNo(1), StepOutcome::success("bytes"), "result-1");
  f.store.complete_step(run, g, StepNo(2), StepOutcome::failure("exit 1"));
  const nlohmann::json settled = {
      {"rule", "synthetic_unsafe"}, {"generation", g.value()}, {"effect_class", "unsafe"}};
  f.store.complete_with_result(run, g, StepNo(3), StepOutcome::settled("unknown"), "result-3",
                               settled);
  f.store.begin_step(run, g, intent(4));

  const auto page = f.store.step_timeline(run, {std::nullopt, 10});
  CHECK_FALSE(page.next_cursor);
  REQUIRE(page.items.size() == 4);
  const auto& first = page.items[0];
  CHECK(first.step_no == StepNo(1));
  CHECK(first.tool == "read_file");
  CHECK(first.call_id == "call-1");
  CHECK(first.effect_key == run.value() + "/1");
  CHECK(first.state == StepState::done);
  CHECK(first.intent_generation == g);
  CHECK(first.result_generation == g);
  CHECK(first.settlement.is_null());
  CHECK_FALSE(first.started_at.empty());
  CHECK(first.finished_at.has_value());
  CHECK(page.items[1].state == StepState::failed);
  CHECK(page.items[2].state == StepState::settled);
  CHECK(page.items[2].settlement == settled);
  const auto& open = page.items[3];
  CHECK(open.state == StepState::intent);
  CHECK_FALSE(open.result_generation.has_value());
  CHECK_FALSE(open.finished_at.has_value());

  CHECK(f.store.step_timeline(RunId(random_uuid()), {}).items.empty());
  CHECK(f.store.step_timeline(f.claimed_run("no-steps").run.run_id, {}).items.empty());
}

TEST_CASE("pages of the step timeline come in order; steps recorded meanwhile come after") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  const RunId run = c.run.run_id;
  for (int i = 1; i <= 23; ++i) f.store.begin_step(run, c.run.generation, intent(i));
  const auto fetch = [&](const paging::PageRequest& p) { return f.store.step_timeline(run, p); };
  for (const int limit : {1, 2, 5, 23, 1000}) {
    INFO("limit " << limit);
    CHECK(keys_of(read_pages(fetch, {std::nullopt, limit}), step_no_of) == one_to(23));
  }

  const auto first = f.store.step_timeline(run, {std::nullopt, 10});
  REQUIRE(first.next_cursor);
  f.store.begin_step(run, c.run.generation, intent(24));
  auto pages = read_pages(fetch, {first.next_cursor, 10});
  pages.insert(pages.begin(), first.items);
  CHECK(keys_of(pages, step_no_of) == one_to(24));
}

TEST_CASE("the step timeline refuses a bad cursor and a bad limit") {
  TranscriptFixture f;
  const auto c = f.claimed_run("r");
  const RunId run = c.run.run_id;
  for (int i = 1; i <= 3; ++i) f.store.begin_step(run, c.run.generation, intent(i));
  f.dispatch("another");
  const auto more_runs = f.ledger.runs_of_requester("alice", {std::nullopt, 1});
  REQUIRE(more_runs.next_cursor);
  CHECK_THROWS_AS(f.store.step_timeline(run, {more_runs.next_cursor, 1}), InvalidArgument);
  CHECK_THROWS_AS(f.store.step_timeline(run, {"step_timeline", 1}), InvalidArgument);
  for (const int limit : {0, 1001}) {
    CHECK_THROWS_AS(f.store.step_timeline(run, {std::nullopt, limit}), InvalidArgument);
  }
  // A cursor names a position, not a run: another run's cursor pages this one from that step on.
  const auto other = f.claimed_run("other");
  for (int i = 1; i <= 2; ++i)
    f.store.begin_step(other.run.run_id, other.run.generation, intent(i));
  const auto other_first = f.store.step_timeline(other.run.run_id, {std::nullopt, 1});
  REQUIRE(other_first.next_cursor);
  CHECK(f.store.step_timeline(run, {other_first.next_cursor, 10}).items.size() == 2);
}

TEST_CASE("a page of the step timeline is a range scan of the step record's primary key") {
  TranscriptFixture f;
  // Staged with SQL: 200 runs of 100 steps each.
  f.sql(
      "INSERT INTO run_steps (run_id, step_no, intent_generation, tool, call_id, args, "
      "effect_key) SELECT r, s, 1, 'bash', 'c' || s, '{}', r || '/' || s "
      "FROM (SELECT gen_random_uuid() AS r FROM generate_series(1, 200)) runs, "
      "generate_series(1, 100) s");
  f.sql("ANALYZE run_steps");
  const std::string run =
      "'" + f.sql("SELECT run_id FROM run_steps LIMIT 1")[0][0].as<std::string>() + "'";
  for (const bool generic : {true, false}) {
    for (const std::string& after : {std::string("40"), std::string("NULL")}) {
      const std::string plan = plan_of(f.db.url(), transcript::sql::kStepTimeline.sql,
                                       run + ", " + after + ", 11", generic);
      INFO(plan);
      CHECK(plan.find("Index Scan using run_steps_pkey") != std::string::npos);
      CHECK(plan.find("Sort") == std::string::npos);
    }
  }
}
