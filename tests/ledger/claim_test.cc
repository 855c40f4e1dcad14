#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "errors/errors.h"
#include "tests/ledger/ledger_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using ledger::RunStatus;
using namespace std::chrono_literals;

TEST_CASE("claim_next takes queued runs oldest first, bumps the generation and sets the lease") {
  LedgerFixture f;
  const RunId first = f.dispatch("1");
  const RunId second = f.dispatch("2");
  const auto owner = make_owner("bot-1");
  const auto claims = f.ledger.claim_next(owner, 1);
  REQUIRE(claims.size() == 1);
  const auto& c = claims[0];
  CHECK(c.run.run_id == first);
  CHECK(c.run.generation == Generation(1));
  CHECK_FALSE(c.taken_over);
  CHECK(c.run.status == RunStatus::running);
  REQUIRE(c.run.owner.has_value());
  CHECK(c.run.owner->slot == owner.slot);
  CHECK(c.run.owner->incarnation == owner.incarnation);
  // The lease is on the database clock: about lease_ttl after the database's now().
  const auto lease_s = f.sql(
                            "SELECT extract(epoch FROM lease_expires_at - runledger_now()) FROM "
                            "live_runs WHERE run_id = '" +
                            first.value() + "'")[0][0]
                           .as<double>();
  CHECK(lease_s > 25.0);
  CHECK(lease_s <= 30.0);
  CHECK(f.ledger.claim_next(owner, 5).size() == 1);  // only `second` is left
  CHECK(f.ledger.claim_next(owner, 5).empty());
  CHECK(f.ledger.get(second).generation == Generation(1));
}

TEST_CASE("many threads claiming one pool claim every run exactly once per generation") {
  LedgerFixture f({}, 8);
  constexpr int kRuns = 400;
  for (int i = 0; i < kRuns; ++i) f.dispatch("run-" + std::to_string(i));

  auto claim_all = [&](int threads) {
    std::mutex mu;
    std::map<std::string, std::vector<std::int64_t>> claimed;  // run -> generations seen
    std::vector<std::string> errors;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const auto owner = make_owner("bot-" + std::to_string(t));
        for (;;) {
          std::vector<ledger::Claim> batch;
          try {
            batch = f.ledger.claim_next(owner, 1 + t % 4);
          } catch (const std::exception& e) {
            std::lock_guard lock(mu);
            errors.push_back(e.what());
            return;
          }
          if (batch.empty()) return;
          std::lock_guard lock(mu);
          for (const auto& c : batch)
            claimed[c.run.run_id.value()].push_back(c.run.generation.value());
        }
      });
    }
    for (auto& t : pool) t.join();
    CHECK(errors.empty());
    return claimed;
  };

  const auto first = claim_all(8);
  CHECK(first.size() == kRuns);
  CHECK(std::all_of(first.begin(), first.end(),
                    [](const auto& kv) { return kv.second == std::vector<std::int64_t>{1}; }));

  // All leases expire together (database clock moved, no sleep): every run is taken over once.
  f.db.advance_clock(31s);
  const auto second = claim_all(8);
  CHECK(second.size() == kRuns);
  CHECK(std::all_of(second.begin(), second.end(),
                    [](const auto& kv) { return kv.second == std::vector<std::int64_t>{2}; }));
  CHECK(f.sql("SELECT count(*) FROM live_runs WHERE takeovers = 1")[0][0].as<int>() == kRuns);
}

TEST_CASE("a lease expires on the database clock, and the reclaim reports a takeover") {
  ledger::Options o;
  o.lease_ttl = 2s;
  LedgerFixture f(o);
  const RunId run = f.dispatch("r");
  const auto a = make_owner("bot-a");
  const auto b = make_owner("bot-b");
  f.ledger.claim_next(a, 1);
  CHECK(f.ledger.claim_next(b, 1).empty());  // lease still live
  CHECK_THROWS_AS(f.ledger.claim(b, run), Conflict);
  f.db.advance_clock(2100ms);
  const auto taken = f.ledger.claim_next(b, 1);
  REQUIRE(taken.size() == 1);
  CHECK(taken[0].taken_over);
  CHECK(taken[0].run.generation == Generation(2));
  CHECK(taken[0].run.takeovers == 1);
  CHECK(taken[0].run.owner->slot == b.slot);
}

TEST_CASE("an expired lease alone does not fence: only a newer claim does") {
  ledger::Options o;
  o.lease_ttl = 1s;
  LedgerFixture f(o);
  const RunId run = f.dispatch("r");
  const auto a = make_owner("bot-a");
  const auto c = f.ledger.claim(a, run);
  f.db.advance_clock(5s);
  // Nobody claimed it: the owner's generation still owns the run, and its heartbeat revives it.
  CHECK(f.ledger.heartbeat(a, {{run, c.run.generation}}).empty());
  CHECK(f.ledger.claim_next(make_owner("bot-b"), 1).empty());
}

TEST_CASE("heartbeat extends many leases in one call and reports the lost ones") {
  ledger::Options o;
  o.lease_ttl = 2s;
  LedgerFixture f(o);
  const auto a = make_owner("bot-a");
  std::vector<RunId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(f.dispatch("h" + std::to_string(i)));
  const auto claims = f.ledger.claim_next(a, 5);
  REQUIRE(claims.size() == 5);
  std::vector<std::pair<RunId, Generation>> held;
  for (const auto& c : claims) held.emplace_back(c.run.run_id, c.run.generation);

  f.db.advance_clock(1500ms);
  CHECK(f.ledger.heartbeat(a, held).empty());
  f.db.advance_clock(1500ms);  // past the original lease, within the extended one
  CHECK(f.ledger.claim_next(make_owner("bot-b"), 5).empty());

  // One run is cancelled, one is taken over after its lease lapses: both are reported lost.
  f.ledger.cancel(held[0].first, "operator");
  f.db.advance_clock(2500ms);
  const auto stolen = f.ledger.claim(make_owner("bot-b"), held[1].first);
  const auto lost = f.ledger.heartbeat(a, held);
  CHECK(lost == std::vector<RunId>{held[0].first, held[1].first});
  CHECK(stolen.run.generation == Generation(2));
  // A heartbeat by another incarnation of the same slot does not extend a lease it does not own.
  const auto impostor = make_owner("bot-a");
  CHECK(f.ledger.heartbeat(impostor, {held[2]}).size() == 1);
}

TEST_CASE(
    "take_over_slot claims the runs of the slot's old incarnation without waiting for leases") {
  LedgerFixture f;
  const auto old_incarnation = make_owner("bot-1");
  const auto other_slot = make_owner("bot-2");
  for (int i = 0; i < 3; ++i) f.dispatch("s" + std::to_string(i));
  f.dispatch("other");
  const auto mine = f.ledger.claim_next(old_incarnation, 3);
  REQUIRE(mine.size() == 3);
  const auto theirs = f.ledger.claim_next(other_slot, 1);
  REQUIRE(theirs.size() == 1);

  const ledger::Owner reborn{old_incarnation.slot, IncarnationId(random_uuid())};
  const auto taken = f.ledger.take_over_slot(reborn);
  CHECK(taken.size() == 3);
  for (const auto& c : taken) {
    CHECK(c.taken_over);
    CHECK(c.run.generation == Generation(2));
    CHECK(c.run.owner->incarnation == reborn.incarnation);
  }
  CHECK(f.ledger.get(theirs[0].run.run_id).generation == Generation(1));  // other slots untouched
  CHECK(f.ledger.take_over_slot(reborn).empty());  // its own runs are not taken again
}

TEST_CASE("release hands a run back for an immediate re-claim without a takeover") {
  LedgerFixture f;
  const RunId run = f.dispatch("r");
  const auto a = make_owner("bot-a");
  const auto c = f.ledger.claim(a, run);
  f.ledger.release(run, c.run.generation);
  const auto again = f.ledger.claim_next(make_owner("bot-b"), 1);
  REQUIRE(again.size() == 1);
  CHECK_FALSE(again[0].taken_over);
  CHECK(again[0].run.generation == Generation(2));
  CHECK(again[0].run.takeovers == 0);
  CHECK_THROWS_AS(f.ledger.release(run, c.run.generation), FencedError);
}

TEST_CASE("claim of a terminal run is a Conflict") {
  LedgerFixture f;
  const RunId run = f.dispatch("r");
  f.ledger.cancel(run, "operator");
  CHECK_THROWS_AS(f.ledger.claim(make_owner("bot-a"), run), Conflict);
  CHECK(f.ledger.claim_next(make_owner("bot-a"), 1).empty());
}

TEST_CASE("claim_expired takes only runs whose lease expired, never queued ones") {
  ledger::Options o;
  o.lease_ttl = 1s;
  LedgerFixture f(o);
  const RunId held = f.dispatch("held");
  const RunId queued = f.dispatch("queued");
  f.ledger.claim(make_owner("bot-a"), held);
  CHECK(f.ledger.claim_expired(make_owner("bot-b"), 5).empty());
  f.db.advance_clock(2s);
  const auto taken = f.ledger.claim_expired(make_owner("bot-b"), 5);
  REQUIRE(taken.size() == 1);
  CHECK(taken[0].run.run_id == held);
  CHECK(taken[0].taken_over);
  CHECK(f.ledger.get(queued).status == RunStatus::queued);
}
