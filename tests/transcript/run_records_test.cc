// A run's transcript entries and step records exist only beside their run (migration 0013: no
// foreign keys; every write reads its run from a row it updates or locks, and a run's deletion
// takes its records with it).
#include "errors/errors.h"
#include "tests/transcript/transcript_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using transcript::EntryKind;
using namespace std::chrono_literals;

namespace {

// Rows of `table` (a fixed name from this file) for `run`.
std::int64_t count_rows(const TranscriptFixture& f, const std::string& table, const RunId& run) {
  pqxx::connection conn(f.db.url());
  pqxx::nontransaction tx(conn);
  return tx
      .exec_params1("SELECT count(*) FROM " + table + " WHERE run_id = $1::uuid", run.value())[0]
      .as<std::int64_t>();
}

}  // namespace

TEST_CASE("no write of any kind leaves an entry or a step for a run that does not exist") {
  TranscriptFixture f;
  const RunId ghost(random_uuid());
  const Generation g(1);
  CHECK_THROWS_AS(f.store.append(ghost, g, EntryKind::user, "x"), NotFound);
  CHECK_THROWS_AS(f.store.begin_step(ghost, g, intent(1)), NotFound);
  CHECK_THROWS_AS(f.store.append_turn(ghost, g, "turn", {intent(1)}), NotFound);
  CHECK_THROWS_AS(f.store.complete_with_result(ghost, g, StepNo(1),
                                               transcript::StepOutcome::success("{}"), "result"),
                  NotFound);
  CHECK(count_rows(f, "transcript_entries", ghost) == 0);
  CHECK(count_rows(f, "run_steps", ghost) == 0);
}

TEST_CASE(
    "a run deleted by the retention sweep takes its entries and steps, and other runs keep "
    "theirs") {
  ledger::Options o;
  o.retention = 1h;
  TranscriptFixture f(o);
  const auto gone = f.claimed_run("gone");
  const auto kept = f.claimed_run("kept");
  for (const auto* c : {&gone, &kept}) {
    f.store.append_turn(c->run.run_id, c->run.generation, "turn", {intent(1), intent(2)});
    f.store.complete_with_result(c->run.run_id, c->run.generation, StepNo(1),
                                 transcript::StepOutcome::success("{}"), "result");
  }
  f.ledger.finish(gone.run.run_id, gone.run.generation, ledger::RunStatus::finished, nullptr);
  f.db.advance_clock(2h);
  CHECK(f.ledger.sweep_retention() == 1);
  CHECK(count_rows(f, "transcript_entries", gone.run.run_id) == 0);
  CHECK(count_rows(f, "run_steps", gone.run.run_id) == 0);
  CHECK(count_rows(f, "transcript_entries", kept.run.run_id) == 2);
  CHECK(count_rows(f, "run_steps", kept.run.run_id) == 2);
  CHECK(f.store.verify(kept.run.run_id).ok);
}
