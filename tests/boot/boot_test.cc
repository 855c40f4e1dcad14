// Invariants 7 and 8: boot before work, graceful handoff; plus heartbeats and self-fencing.
#include <future>
#include <thread>

#include "boot/boot.h"
#include "errors/errors.h"
#include "tests/ledger/ledger_fixture.h"
#include "tests/support/waiting.h"

using namespace runledger;
using namespace runledger::testing;
using ledger::RunStatus;
using namespace std::chrono_literals;

namespace {

// Drives a run by "running a tool" every few milliseconds until it has run `tools` of them, then
// finishes it. A tool can be made to block (inside_tool) to play a long or stuck tool.
struct CountingDriver : boot::RunDriver {
  explicit CountingDriver(int tools) : tools(tools) {}

  settlement::Callbacks callbacks(const ledger::Run&) override {
    return {
        [](std::string_view) { return std::vector<settlement::ToolCall>{}; },
        [](const settlement::ToolCall&, const settlement::ToolContext&) {
          return transcript::StepOutcome::success("");
        },
        [](const settlement::ToolCall&, const transcript::StepOutcome&) { return std::string(); }};
  }

  bool drive(boot::RunContext& ctx) override {
    {
      std::lock_guard lock(mu);
      started.push_back(ctx.claim().run.run_id.value());
    }
    active++;
    struct Leave {
      std::atomic<int>& active;
      ~Leave() { active--; }
    } leave{active};
    for (int i = 0; i < tools; ++i) {
      if (ctx.stop_requested()) return true;  // between tools: a safe point
      if (ctx.lost() || !ctx.may_start_tool()) {
        stopped_as_lost++;
        return false;
      }
      if (block_in_tool) blocker.wait();
      std::this_thread::sleep_for(2ms);
      tools_run++;
      if (write_after_tool) {
        // What a real driver does when its tool returns: record the result.
        ctx.store().append(ctx.claim().run.run_id, ctx.claim().run.generation,
                           transcript::EntryKind::tool_result, "after the tool");
        wrote_after_tool++;
      }
    }
    ctx.ledger().finish(ctx.claim().run.run_id, ctx.claim().run.generation, RunStatus::finished,
                        {{"tools", tools}});
    return false;
  }

  int tools;
  std::atomic<int> tools_run{0};
  std::atomic<int> stopped_as_lost{0};
  std::atomic<int> active{0};
  bool block_in_tool = false;
  bool write_after_tool = false;
  std::atomic<int> wrote_after_tool{0};
  std::shared_future<void> blocker;
  std::mutex mu;
  std::vector<std::string> started;
};

boot::Options slot_options(const std::string& slot) {
  boot::Options o;
  o.slot = SlotName(slot);
  o.capacity = 8;
  o.pool_size = 3;
  o.slot_wait = 300ms;
  o.handoff_grace = 2s;
  o.safety_margin = 500ms;
  o.poll_interval = 50ms;
  return o;
}

ledger::Options lease(std::chrono::milliseconds ttl) {
  ledger::Options o;
  o.lease_ttl = ttl;
  return o;
}

// A failed REQUIRE must not leave run() looping forever inside the future's destructor.
struct StopOnExit {
  boot::Process& process;
  ~StopOnExit() { process.request_stop(); }
};

}  // namespace

TEST_CASE("a second live process with the same slot is refused, and another slot is not") {
  TestDatabase db;
  auto driver = std::make_shared<CountingDriver>(1);
  boot::Process first(db.url(), {}, {}, {}, slot_options("bot-1"), driver);
  first.boot();
  boot::Process twin(db.url(), {}, {}, {}, slot_options("bot-1"), driver);
  CHECK_THROWS_AS(twin.boot(), Conflict);
  boot::Process other(db.url(), {}, {}, {}, slot_options("bot-2"), driver);
  CHECK_NOTHROW(other.boot());
}

TEST_CASE("boot takes over the dead incarnation's runs at once and settles them before work") {
  LedgerFixture f;  // leases of 30 s: nothing expires during this test
  const auto dead = make_owner("bot-1");
  std::vector<RunId> mine;
  for (int i = 0; i < 3; ++i) mine.push_back(f.dispatch("mine-" + std::to_string(i)));
  const RunId queued = f.dispatch("queued");
  for (const auto& run : mine) f.ledger.claim(dead, run);

  auto driver = std::make_shared<CountingDriver>(3);
  boot::Process reborn(f.db.url(), {}, {}, {}, slot_options("bot-1"), driver);
  reborn.boot();
  for (const auto& run : mine) {
    const auto r = f.ledger.get(run);
    CHECK(r.generation == Generation(2));
    CHECK(r.owner->incarnation == reborn.owner().incarnation);
  }
  // The queued run is new work: untouched until run() starts taking work.
  CHECK(f.ledger.get(queued).status == RunStatus::queued);
  const auto timeline = reborn.timeline();
  REQUIRE(timeline.size() >= 6);
  CHECK(timeline[2].what.find("took over 3 runs") != std::string::npos);
  CHECK(timeline[4].what.find("settled 3 runs") != std::string::npos);

  auto running = std::async(std::launch::async, [&] { reborn.run(); });
  const StopOnExit stop_on_exit{reborn};
  CHECK(wait_for([&] { return f.ledger.get(queued).status == RunStatus::finished; }, 10s));
  for (const auto& run : mine) {
    CHECK(wait_for([&] { return f.ledger.get(run).status == RunStatus::finished; }, 10s));
  }
  reborn.request_stop();
  running.get();
}

TEST_CASE("boot reclaims other slots' expired leases but leaves live ones") {
  LedgerFixture f(lease(1s));
  const RunId expired = f.dispatch("expired");
  const RunId live = f.dispatch("live");
  f.ledger.claim(make_owner("bot-9"), expired);
  f.db.advance_clock(2s);
  f.ledger.claim(make_owner("bot-8"), live);  // fresh lease on the moved clock
  auto driver = std::make_shared<CountingDriver>(1000);
  driver->block_in_tool = true;
  std::promise<void> never;
  driver->blocker = never.get_future().share();
  boot::Process p(f.db.url(), lease(1s), {}, {}, slot_options("bot-1"), driver);
  p.boot();
  CHECK(f.ledger.get(expired).owner->slot == SlotName("bot-1"));
  CHECK(f.ledger.get(live).owner->slot == SlotName("bot-8"));
  never.set_value();
}

TEST_CASE("heartbeats keep the leases of held runs alive") {
  LedgerFixture f(lease(1500ms));
  const RunId run = f.dispatch("r");
  auto driver = std::make_shared<CountingDriver>(100000);
  boot::Process p(f.db.url(), lease(1500ms), {}, {}, slot_options("bot-1"), driver);
  p.boot();
  auto running = std::async(std::launch::async, [&] { p.run(); });
  const StopOnExit stop_on_exit{p};
  REQUIRE(wait_for([&] { return f.ledger.get(run).status == RunStatus::running; }, 5s));
  std::this_thread::sleep_for(3s);  // two lease lengths of real time: heartbeats are timers
  CHECK(f.ledger.claim_next(make_owner("bot-2"), 1).empty());
  CHECK(f.ledger.get(run).generation == Generation(1));
  p.request_stop();
  running.get();
}

TEST_CASE("a run taken by another process is stopped: no tool starts after the loss") {
  LedgerFixture f(lease(1s));
  const RunId run = f.dispatch("r");
  auto driver = std::make_shared<CountingDriver>(100000);
  driver->block_in_tool = true;
  std::promise<void> unblock;
  driver->blocker = unblock.get_future().share();
  boot::Process p(f.db.url(), lease(1s), {}, {}, slot_options("bot-1"), driver);
  p.boot();
  auto running = std::async(std::launch::async, [&] { p.run(); });
  const StopOnExit stop_on_exit{p};
  REQUIRE(wait_for([&] { return driver->started.size() == 1; }, 5s));
  // While the driver sits in a tool past its lease (as a SIGSTOPped process would), the clock
  // moves past the lease and another process claims the run, with a long lease of its own.
  // (Written as the claim's own update: this process's heartbeats, unlike a stopped process's,
  // would otherwise keep renewing the lease the thief is waiting for.)
  f.sql(
      "UPDATE live_runs SET generation = generation + 1, owner_slot = 'bot-2', "
      "lease_expires_at = runledger_now() + interval '60 s' WHERE run_id = '" +
      run.value() + "'");
  const Generation thief_generation(2);
  unblock.set_value();
  CHECK(wait_for([&] { return driver->stopped_as_lost > 0; }, 5s));
  const int ran = driver->tools_run;
  std::this_thread::sleep_for(200ms);
  CHECK(driver->tools_run == ran);  // nothing more ran
  CHECK(f.ledger.get(run).generation == thief_generation);
  p.request_stop();
  running.get();
}

TEST_CASE("a stop hands runs off at a safe point and releases them for an immediate claim") {
  LedgerFixture f;
  const RunId run = f.dispatch("r");
  auto driver = std::make_shared<CountingDriver>(100000);
  boot::Process p(f.db.url(), {}, {}, {}, slot_options("bot-1"), driver);
  p.boot();
  auto running = std::async(std::launch::async, [&] { p.run(); });
  const StopOnExit stop_on_exit{p};
  REQUIRE(wait_for([&] { return driver->tools_run > 3; }, 5s));
  p.request_stop();
  running.get();
  const auto after = f.ledger.get(run);
  CHECK(after.status == RunStatus::queued);
  CHECK_FALSE(after.lease_expires_at.has_value());
  const auto next = f.ledger.claim_next(make_owner("bot-2"), 1);  // at once, no lease wait
  REQUIRE(next.size() == 1);
  CHECK_FALSE(next[0].taken_over);
}

TEST_CASE("a run still inside a tool when the grace ends is left to lease expiry") {
  LedgerFixture f;
  const RunId run = f.dispatch("r");
  auto driver = std::make_shared<CountingDriver>(100000);
  driver->block_in_tool = true;
  std::promise<void> unblock;
  driver->blocker = unblock.get_future().share();
  auto options = slot_options("bot-1");
  options.handoff_grace = 300ms;
  boot::Process p(f.db.url(), {}, {}, {}, options, driver);
  p.boot();
  auto running = std::async(std::launch::async, [&] { p.run(); });
  const StopOnExit stop_on_exit{p};
  REQUIRE(wait_for([&] { return driver->started.size() == 1; }, 5s));
  p.request_stop();
  running.get();
  const auto after = f.ledger.get(run);
  CHECK(after.status == RunStatus::running);  // never released mid-tool
  CHECK(after.lease_expires_at.has_value());
  unblock.set_value();
  // The abandoned driver sees the stop and returns; it must not outlive this test's objects.
  CHECK(wait_for([&] { return driver->active == 0; }, 5s));
}

namespace {

int advisory_locks(LedgerFixture& f) {
  return f
      .sql(
          "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
          "(SELECT oid FROM pg_database WHERE datname = current_database())")[0][0]
      .as<int>();
}

int entries_of(LedgerFixture& f, const RunId& run) {
  return f.sql("SELECT count(*) FROM transcript_entries WHERE run_id = '" + run.value() + "'")[0][0]
      .as<int>();
}

}  // namespace

// A run inside a tool that blocks until `unblock`, then records its result.
struct BlockedInTool {
  explicit BlockedInTool(std::chrono::milliseconds ttl) : f(lease(ttl)), run(f.dispatch("r")) {
    driver->block_in_tool = true;
    driver->write_after_tool = true;
    driver->blocker = unblock.get_future().share();
  }
  boot::Options options() const {
    auto o = slot_options("bot-1");
    o.handoff_grace = 200ms;
    return o;
  }
  // After the Process is gone: the tool returns, and its write must land through live objects.
  void return_from_tool() {
    unblock.set_value();
    REQUIRE(wait_for([&] { return driver->active == 0; }, 5s));
    CHECK(driver->wrote_after_tool == 1);
    CHECK(entries_of(f, run) == 1);
  }
  LedgerFixture f;
  RunId run;
  std::shared_ptr<CountingDriver> driver = std::make_shared<CountingDriver>(100000);
  std::promise<void> unblock;
};

TEST_CASE("a Process destroyed while a run is inside a tool: the tool returns into live objects") {
  BlockedInTool t(30s);
  {
    boot::Process p(t.f.db.url(), lease(30s), {}, {}, t.options(), t.driver);
    p.boot();
    auto running = std::async(std::launch::async, [&] { p.run(); });
    const StopOnExit stop_on_exit{p};
    REQUIRE(wait_for([&] { return t.driver->started.size() == 1; }, 5s));
    p.request_stop();
    running.get();
  }                                 // destroyed: the worker is detached inside its tool
  CHECK(advisory_locks(t.f) == 0);  // the slot was given up with the Process
  t.return_from_tool();
}

TEST_CASE("a Process destroyed after its slot's session was ended: the tool returns safely") {
  BlockedInTool t(1s);
  {
    boot::Process p(t.f.db.url(), lease(1s), {}, {}, t.options(), t.driver);
    p.boot();
    auto running = std::async(std::launch::async, [&] { p.run(); });
    const StopOnExit stop_on_exit{p};
    REQUIRE(wait_for([&] { return t.driver->started.size() == 1; }, 5s));
    // As a database restart would: the slot's session ends, so the lock is gone.
    t.f.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND "
        "database = (SELECT oid FROM pg_database WHERE datname = current_database())");
    CHECK_THROWS_AS(running.get(), Unavailable);  // the next heartbeat finds the slot lost
  }
  t.return_from_tool();
}
