#include "errors/errors.h"
#include "tests/ledger/ledger_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using ledger::RunStatus;
using namespace std::chrono_literals;

TEST_CASE("the retention sweep deletes terminal runs older than the retention age only") {
  ledger::Options o;
  o.retention = std::chrono::hours(24);
  LedgerFixture f(o);
  const auto owner = make_owner("bot-1");
  const RunId old_finished = f.dispatch("old");
  const auto c = f.ledger.claim(owner, old_finished);
  f.ledger.finish(old_finished, c.run.generation, RunStatus::finished, nullptr);
  const RunId old_live = f.dispatch("old-live");
  f.db.advance_clock(25h);
  const RunId young_cancelled = f.dispatch("young");
  f.ledger.cancel(young_cancelled, "op");

  CHECK(f.ledger.sweep_retention() == 1);
  CHECK_THROWS_AS(f.ledger.get(old_finished), NotFound);
  CHECK(f.ledger.get(old_live).status == RunStatus::queued);  // live runs are never swept
  CHECK(f.ledger.get(young_cancelled).status == RunStatus::cancelled);
  CHECK(f.ledger.sweep_retention() == 0);
}

TEST_CASE("the retention sweep deletes in batches and keeps children of deleted parents") {
  ledger::Options o;
  o.retention = std::chrono::hours(1);
  LedgerFixture f(o);
  const RunId parent = f.dispatch("parent");
  auto child = request("child");
  child.parent_run = parent;
  const RunId kept_child = f.ledger.dispatch(child).run.run_id;
  f.ledger.cancel(parent, "op");
  for (int i = 0; i < 1200; ++i) f.ledger.cancel(f.dispatch("bulk-" + std::to_string(i)), "op");
  f.db.advance_clock(2h);
  CHECK(f.ledger.sweep_retention() == 1201);
  const auto c = f.ledger.get(kept_child);
  CHECK_FALSE(c.parent_run.has_value());
}
