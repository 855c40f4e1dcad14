// Invariant 1, "one writer": a write is ordered before the claim that ended its generation, or
// refused. These tests interleave a fenced write and a claim in both orders, and fail if the
// write's generation check is not serialized against claims (a plain WHERE, or FOR KEY SHARE).
#include <atomic>
#include <future>
#include <thread>

#include "errors/errors.h"
#include "failpoint/failpoint.h"
#include "tests/ledger/ledger_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using ledger::RunStatus;
using namespace std::chrono_literals;

namespace {

struct FencingFixture : LedgerFixture {
  FencingFixture() : LedgerFixture(short_lease()) {
    sql("CREATE TABLE fence_probe (run_id uuid, generation bigint)");
    db.advance_clock(2s);  // A's lease has lapsed: B may claim, A's generation still writes
  }
  static ledger::Options short_lease() {
    ledger::Options o;
    o.lease_ttl = 1s;
    return o;
  }
  // Polls (no sleep-and-hope) until some session of this database waits on a lock.
  bool some_session_waits_on_a_lock(std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
              "AND wait_event_type = 'Lock'")[0][0]
              .as<int>() > 0) {
        return true;
      }
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
  int probes() const { return sql("SELECT count(*) FROM fence_probe")[0][0].as<int>(); }

  ledger::Owner owner_a = make_owner("bot-a");
  ledger::Owner owner_b = make_owner("bot-b");
  RunId run = dispatch("fenced");
  ledger::Claim first = ledger.claim(owner_a, run);
};

void insert_probe(pqxx::work& tx, const RunId& run, Generation g) {
  tx.exec_params("INSERT INTO fence_probe VALUES ($1::uuid, $2)", run.value(), g.value());
}

}  // namespace

TEST_CASE("a fenced write that is in flight makes a claim wait, and the claimer sees the write") {
  FencingFixture f;
  std::promise<void> inside, may_commit;
  auto may_commit_future = may_commit.get_future();
  auto writer = std::async(std::launch::async, [&] {
    f.ledger.write_fenced(f.run, f.first.run.generation, [&](pqxx::work& tx) {
      insert_probe(tx, f.run, f.first.run.generation);
      inside.set_value();
      may_commit_future.wait();  // the transaction stays open, holding FOR SHARE on the run row
    });
  });
  inside.get_future().wait();

  std::atomic<bool> claimed{false};
  auto claimer = std::async(std::launch::async, [&] {
    auto c = f.ledger.claim(f.owner_b, f.run);
    claimed = true;
    return c;
  });
  const bool claim_waited = f.some_session_waits_on_a_lock(5s);
  const bool claimed_while_write_open = claimed.load();
  may_commit.set_value();
  writer.get();  // the write landed: it was ordered before the claim
  const auto c = claimer.get();

  CHECK(claim_waited);
  CHECK_FALSE(claimed_while_write_open);
  CHECK(c.run.generation == Generation(2));
  CHECK(f.probes() == 1);  // visible to the new owner's settlement
}

TEST_CASE("a claim that commits first makes the in-flight fenced write fail as FencedError") {
  FencingFixture f;
  failpoint::arm("ledger.claim.before_commit", failpoint::Action::pause);
  auto claimer = std::async(std::launch::async, [&] { return f.ledger.claim(f.owner_b, f.run); });
  REQUIRE(failpoint::wait_until_paused("ledger.claim.before_commit", 5s));

  std::atomic<bool> body_ran{false};
  auto writer = std::async(std::launch::async, [&] {
    f.ledger.write_fenced(f.run, f.first.run.generation, [&](pqxx::work& tx) {
      body_ran = true;
      insert_probe(tx, f.run, f.first.run.generation);
    });
  });
  const bool write_waited = f.some_session_waits_on_a_lock(5s);
  failpoint::release("ledger.claim.before_commit");
  const auto c = claimer.get();
  bool fenced = false;
  try {
    writer.get();
  } catch (const FencedError& e) {
    fenced = e.details()["current_generation"] == 2;
  }
  CHECK(write_waited);
  CHECK(fenced);
  CHECK_FALSE(body_ran.load());
  CHECK(f.probes() == 0);
  CHECK(c.run.generation == Generation(2));
}

TEST_CASE("every owner write naming an old generation is refused after a newer claim") {
  FencingFixture f;
  const auto newer = f.ledger.claim(f.owner_b, f.run);
  const Generation old = f.first.run.generation;
  CHECK_THROWS_AS(f.ledger.write_fenced(f.run, old, [](pqxx::work&) {}), FencedError);
  CHECK_THROWS_AS(f.ledger.finish(f.run, old, RunStatus::finished, nullptr), FencedError);
  CHECK_THROWS_AS(f.ledger.release(f.run, old), FencedError);
  CHECK(f.ledger.heartbeat(f.owner_a, {{f.run, old}}) == std::vector<RunId>{f.run});
  // The new owner is unaffected.
  f.ledger.write_fenced(f.run, newer.run.generation,
                        [&](pqxx::work& tx) { insert_probe(tx, f.run, newer.run.generation); });
  CHECK(f.probes() == 1);
  CHECK(f.ledger.get(f.run).status == RunStatus::running);
}

TEST_CASE("an operator's cancel fences the owner's next write") {
  FencingFixture f;
  const auto owner = f.ledger.claim(f.owner_b, f.run);
  f.ledger.cancel(f.run, "operator:carol");
  CHECK_THROWS_AS(f.ledger.write_fenced(f.run, owner.run.generation, [](pqxx::work&) {}),
                  FencedError);
  CHECK_THROWS_AS(f.ledger.finish(f.run, owner.run.generation, RunStatus::finished, nullptr),
                  FencedError);
  const auto after = f.ledger.get(f.run);
  CHECK(after.status == RunStatus::cancelled);
  CHECK(after.result["cancelled_by"] == "operator:carol");
  f.ledger.cancel(f.run, "operator:carol");  // cancelling again is a no-op
}

TEST_CASE("a write naming a generation that never owned the run is refused") {
  FencingFixture f;
  CHECK_THROWS_AS(f.ledger.write_fenced(f.run, Generation(7), [](pqxx::work&) {}), FencedError);
  CHECK_THROWS_AS(f.ledger.finish(f.run, Generation(0), RunStatus::failed, nullptr), FencedError);
}
