#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "boot/boot.h"
#include "boot/slot_lock.h"
#include "errors/errors.h"
#include "pg/pg.h"

namespace runledger::boot {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t ticks(Clock::time_point t) {
  return t.time_since_epoch().count();
}

}  // namespace

struct HeldRun;

pg::Pool::Options pool_options(const std::string& url, const Options& o) {
  pg::Pool::Options p;
  p.url = url;
  p.size = o.pool_size;
  p.lock_timeout = o.lock_timeout;
  return p;
}

// Shared by the Process and every run worker (a worker detached inside a tool outlives the
// Process and must find all of this alive when the tool returns).
struct Process::State : std::enable_shared_from_this<Process::State> {
  State(std::string url, ledger::Options lo, transcript::Options to,
        settlement::EffectClasses classes, Options o, std::shared_ptr<RunDriver> d)
      : database_url(std::move(url)),
        options(std::move(o)),
        driver(std::move(d)),
        pool(pool_options(database_url, options)),
        ledger(pool, lo),
        store(pool, ledger, to),
        settler(ledger, store, std::move(classes), options.settlement),
        owner{options.slot, IncarnationId(random_uuid())},
        started(Clock::now()) {}

  void note(const std::string& what) {
    const auto at = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    {
      std::lock_guard lock(mu);
      timeline.push_back({at, what});
    }
    spdlog::info("[{} +{} ms] {}", options.slot.value(), at.count(), what);
  }

  // One batched heartbeat; marks lost runs. Serialized: the heartbeat thread and a driver's
  // re-verification may both want one.
  void beat();
  bool may_start_tool(HeldRun& run);
  void start_driver(std::shared_ptr<HeldRun> run);
  void heartbeat_loop();
  // Settles a claim (retrying transient failures while `keep_trying`); nullopt when the run was
  // interrupted or lost meanwhile, or could not be settled.
  std::optional<settlement::Resume> settle(const ledger::Claim& claim,
                                           const std::function<bool()>& keep_trying);
  // A run worker's life: settle if needed, drive, and after a transient failure settle and drive
  // again (with backoff) while the run is still ours.
  void work(HeldRun& run);
  std::size_t reap();

  std::string database_url;
  Options options;
  std::shared_ptr<RunDriver> driver;
  pg::Pool pool;
  ledger::Ledger ledger;
  transcript::Store store;
  settlement::Settler settler;
  ledger::Owner owner;
  Clock::time_point started;
  std::unique_ptr<SlotLock> slot;

  mutable std::mutex mu;
  std::condition_variable wake;
  std::vector<TimelineEvent> timeline;
  // Keyed by run id and generation: a lost run's driver may still be winding down when the same
  // run is claimed again. Guarded by mu.
  std::map<std::string, std::shared_ptr<HeldRun>> held;
  std::mutex beat_mu;
  std::atomic<std::int64_t> last_good_beat{0};  // steady clock ticks
  std::atomic<bool> slot_lost{false};
  std::atomic<bool> stopping{false};
  std::atomic<bool> quit_heartbeat{false};
  std::thread heartbeat_thread;
};

struct HeldRun : RunContext {
  HeldRun(Process::State& s, ledger::Claim c) : state(s), claim_(std::move(c)) {}
  std::string key() const {
    return claim_.run.run_id.value() + "#" + std::to_string(claim_.run.generation.value());
  }
  const ledger::Claim& claim() const override { return claim_; }
  const settlement::Resume& resume() const override { return resume_; }
  bool lost() const override { return lost_ || state.slot_lost; }
  bool stop_requested() const override { return state.stopping; }
  bool may_start_tool() override { return state.may_start_tool(*this); }
  ledger::Ledger& ledger() override { return state.ledger; }
  transcript::Store& store() override { return state.store; }

  // Alive while this run's worker is: the worker holds the State.
  Process::State& state;
  ledger::Claim claim_;
  settlement::Resume resume_{false, 0, StepNo(1), {}};
  // Resumed (taken over mid-run, or handed back by a release between tool calls) and not settled
  // yet: boot settles before drivers start; runs claimed later are settled on their worker.
  bool needs_settlement = claim_.taken_over || claim_.run.generation.value() > 1;
  std::atomic<bool> lost_{false};
  std::atomic<bool> done{false};
  std::atomic<bool> safe_point{false};  // the driver returned at a safe point: releasable
  std::thread worker;
};

void Process::State::beat() {
  std::lock_guard beat_lock(beat_mu);
  const auto start = Clock::now();
  std::vector<std::pair<RunId, Generation>> runs;
  std::vector<std::shared_ptr<HeldRun>> live;
  {
    std::lock_guard lock(mu);
    for (const auto& [id, run] : held) {
      if (run->done || run->lost_) continue;
      runs.emplace_back(run->claim_.run.run_id, run->claim_.run.generation);
      live.push_back(run);
    }
  }
  try {
    if (slot && !slot->still_held()) {
      if (!slot_lost.exchange(true))
        spdlog::error("{}: slot lost; stopping every run", owner.slot.value());
      return;
    }
    const auto lost = ledger.heartbeat(owner, runs);
    for (const auto& run : live) {
      if (std::find(lost.begin(), lost.end(), run->claim_.run.run_id) == lost.end()) continue;
      run->lost_ = true;
      std::string now_at = "?";
      try {
        now_at = std::to_string(ledger.get(run->claim_.run.run_id).generation.value());
      } catch (const std::exception&) {
      }
      spdlog::warn("run {} lost: this process held generation {}, the run is now at {}",
                   run->claim_.run.run_id.value(), run->claim_.run.generation.value(), now_at);
    }
    last_good_beat = ticks(start);
  } catch (const std::exception& e) {
    spdlog::error("heartbeat failed: {}", e.what());
  }
}

bool Process::State::may_start_tool(HeldRun& run) {
  if (run.lost() || stopping) return false;
  const auto fresh_for = ledger.options().lease_ttl - options.safety_margin;
  const auto fresh = [&] {
    return Clock::now() - Clock::time_point(Clock::duration(last_good_beat.load())) < fresh_for;
  };
  if (fresh()) return true;
  beat();  // stale: re-verify before anything starts
  return fresh() && !run.lost();
}

void Process::State::heartbeat_loop() {
  const auto every = ledger.options().lease_ttl / 3;
  std::unique_lock lock(mu);
  while (!quit_heartbeat) {
    wake.wait_for(lock, every, [&] { return quit_heartbeat.load(); });
    if (quit_heartbeat) return;
    lock.unlock();
    beat();
    lock.lock();
  }
}

std::optional<settlement::Resume> Process::State::settle(const ledger::Claim& claim,
                                                         const std::function<bool()>& keep_trying) {
  try {
    // Settling is safe to repeat: what a try recorded, the next one finds done.
    auto resume = pg::retry_unavailable(
        options.unavailable_backoff,
        [&] { return settler.settle(claim, driver->callbacks(claim.run)); }, keep_trying);
    if (resume.interrupted) {
      note("run " + claim.run.run_id.value() +
           " interrupted: taken over too often without progress");
      return std::nullopt;
    }
    return resume;
  } catch (const FencedError& e) {
    spdlog::warn("run {} lost while settling: {}", claim.run.run_id.value(), e.what());
    return std::nullopt;
  } catch (const std::exception& e) {
    // One bad run must not keep the process from booting: it is left to lease expiry, and after
    // max_takeovers_without_progress such claims settlement interrupts it.
    spdlog::error("run {} could not be settled: {}", claim.run.run_id.value(), e.what());
    return std::nullopt;
  }
}

void Process::State::work(HeldRun& run) {
  const auto ours = [&] { return !run.lost() && !stopping; };
  for (int failures = 0;;) {
    try {
      if (run.needs_settlement) {
        auto resume = settle(run.claim_, ours);
        if (!resume) return;
        run.resume_ = std::move(*resume);
        run.needs_settlement = false;
      }
      run.safe_point = driver->drive(run);
      return;
    } catch (const Unavailable& e) {
      // Not the run's outcome. The driver gave up mid-run: what it had recorded is settled again
      // (same generation) and the run driven on from there.
      if (!ours() || ++failures >= options.unavailable_backoff.tries) {
        spdlog::warn("run {}: {}; left to its lease", run.claim_.run.run_id.value(), e.what());
        return;
      }
      const auto wait = options.unavailable_backoff.delay(failures);
      spdlog::warn("run {}: {}; driving it again in {} ms", run.claim_.run.run_id.value(), e.what(),
                   wait.count());
      pg::sleep_for_backoff(wait, ours);
      run.needs_settlement = true;
    }
  }
}

void Process::State::start_driver(std::shared_ptr<HeldRun> run) {
  {
    std::lock_guard lock(mu);
    held[run->key()] = run;
  }
  // The worker owns the state and its run: it may outlive the Process (detached inside a tool).
  run->worker = std::thread([self = shared_from_this(), run] {
    try {
      self->work(*run);
    } catch (const FencedError& e) {
      spdlog::warn("run {} fenced: {}", run->claim_.run.run_id.value(), e.what());
      run->lost_ = true;
    } catch (const std::exception& e) {
      spdlog::error("run {} driver failed: {}", run->claim_.run.run_id.value(), e.what());
    }
    {
      std::lock_guard lock(self->mu);
      run->done = true;
    }
    self->wake.notify_all();
  });
}

std::size_t Process::State::reap() {
  std::lock_guard lock(mu);
  for (auto it = held.begin(); it != held.end();) {
    if (it->second->done) {
      if (it->second->worker.joinable()) it->second->worker.join();
      it = held.erase(it);
    } else {
      ++it;
    }
  }
  return held.size();
}

Process::Process(std::string database_url, ledger::Options ledger_options,
                 transcript::Options transcript_options, settlement::EffectClasses classes,
                 Options options, std::shared_ptr<RunDriver> driver)
    : state_(std::make_shared<State>(std::move(database_url), ledger_options, transcript_options,
                                     std::move(classes), std::move(options), std::move(driver))) {
  if (!state_->driver) throw InvalidArgument("a bot process needs a run driver");
}

Process::~Process() {
  auto& s = *state_;
  s.stopping = true;
  s.quit_heartbeat = true;
  s.wake.notify_all();
  if (s.heartbeat_thread.joinable()) s.heartbeat_thread.join();
  std::unique_lock lock(s.mu);
  s.wake.wait_for(lock, s.options.handoff_grace, [&] {
    for (const auto& [id, run] : s.held) {
      if (!run->done) return false;
    }
    return true;
  });
  for (auto& [id, run] : s.held) {
    if (!run->worker.joinable()) continue;
    if (run->done) {
      run->worker.join();
    } else {
      // Still inside a tool: left to lease expiry, as in a handoff. The worker holds the state.
      run->worker.detach();
    }
  }
  s.held.clear();
  lock.unlock();
  // Give the slot up now, as a process that exits does: a successor need not wait for the tool.
  std::lock_guard beat_lock(s.beat_mu);
  s.slot_lost = true;
  s.slot.reset();
}

void Process::boot() {
  auto& s = *state_;
  s.note("boot: slot " + s.owner.slot.value() + ", incarnation " + s.owner.incarnation.value());
  if (s.owner.slot.value().starts_with(ledger::kHttpSlotPrefix)) {
    throw InvalidArgument("slot names starting with \"" + std::string(ledger::kHttpSlotPrefix) +
                              "\" are the HTTP API's",
                          {{"field", "slot"}});
  }
  s.slot = std::make_unique<SlotLock>(s.database_url, s.owner.slot, s.options.slot_wait);
  s.note("slot taken");
  auto claims = s.ledger.take_over_slot(s.owner);
  s.note("took over " + std::to_string(claims.size()) + " runs of the slot's previous incarnation");
  const int room = s.options.capacity - static_cast<int>(claims.size());
  auto expired = s.ledger.claim_expired(s.owner, room);
  s.note("claimed " + std::to_string(expired.size()) + " runs whose leases expired");
  claims.insert(claims.end(), expired.begin(), expired.end());

  // Leases are 30 s; settling many runs can take a while, so heartbeats start first.
  std::vector<std::shared_ptr<HeldRun>> runs;
  {
    std::lock_guard lock(s.mu);
    for (auto& c : claims) {
      auto run = std::make_shared<HeldRun>(s, std::move(c));
      s.held[run->key()] = run;
      runs.push_back(run);
    }
  }
  s.last_good_beat = ticks(Clock::now());
  s.heartbeat_thread = std::thread([&s] { s.heartbeat_loop(); });

  // Settled side by side: each settlement commits at least once, and commits of several
  // sessions share a WAL flush, so a pool's worth of settlers finish a reclaim of 1,000 runs
  // several times sooner than one would. The heartbeat keeps a connection of the pool free.
  std::size_t settled_steps = 0;
  std::vector<std::shared_ptr<HeldRun>> resumed;
  {
    std::atomic<std::size_t> next{0};
    const auto settle_some = [&] {
      for (std::size_t i = next++; i < runs.size(); i = next++) {
        auto& run = runs[i];
        auto resume = s.settle(run->claim_, [&] { return !run->lost() && !s.stopping; });
        std::lock_guard lock(s.mu);
        if (!resume) {
          s.held.erase(run->key());
          continue;
        }
        settled_steps += resume->settled.size();
        run->resume_ = std::move(*resume);
        run->needs_settlement = false;
        resumed.push_back(run);
      }
    };
    const std::size_t settlers =
        std::clamp<std::size_t>(runs.size(), 1, std::max(1, s.options.pool_size - 1));
    std::vector<std::jthread> threads;
    for (std::size_t i = 1; i < settlers; ++i) threads.emplace_back(settle_some);
    settle_some();
  }
  s.note("settled " + std::to_string(resumed.size()) + " runs (" + std::to_string(settled_steps) +
         " steps in flight)");
  for (auto& run : resumed) s.start_driver(run);
  s.note("resumed " + std::to_string(resumed.size()) + " runs; taking new work");
}

void Process::run() {
  auto& s = *state_;
  pqxx::connection listener(s.database_url);
  struct Waker : pqxx::notification_receiver {
    using notification_receiver::notification_receiver;
    void operator()(const std::string&, int) override {}
  } waker(listener, "runledger_runs");

  while (!s.stopping && !s.slot_lost) {
    const int room = s.options.capacity - static_cast<int>(s.reap());
    if (room > 0) {
      try {
        for (auto& claim : s.ledger.claim_next(s.owner, room)) {
          s.start_driver(std::make_shared<HeldRun>(s, std::move(claim)));
        }
      } catch (const std::exception& e) {
        spdlog::error("claim failed: {}", e.what());
      }
    }
    const auto wait = s.options.poll_interval;
    try {
      listener.await_notification(wait.count() / 1000, (wait.count() % 1000) * 1000);
    } catch (const std::exception& e) {
      // The wake-up channel is only an optimization: keep polling while it is down.
      spdlog::warn("waiting for new work: {}", e.what());
      std::this_thread::sleep_for(wait);
    }
  }

  // Handoff: drivers return at safe points within the grace; those runs are released at once.
  s.note(s.slot_lost ? "slot lost: stopping" : "stop requested: handing runs off");
  s.stopping = true;
  const auto deadline = Clock::now() + s.options.handoff_grace;
  {
    std::unique_lock lock(s.mu);
    s.wake.wait_until(lock, deadline, [&] {
      for (const auto& [id, run] : s.held) {
        if (!run->done) return false;
      }
      return true;
    });
  }
  int released = 0, left = 0;
  {
    std::lock_guard lock(s.mu);
    for (auto& [id, run] : s.held) {
      if (!run->done) {
        ++left;
        continue;
      }
      if (run->worker.joinable()) run->worker.join();
      if (!run->safe_point || run->lost()) continue;
      try {
        s.ledger.release(run->claim_.run.run_id, run->claim_.run.generation);
        ++released;
      } catch (const Error& e) {
        spdlog::warn("release of {} refused: {}", id, e.what());
      }
    }
  }
  s.quit_heartbeat = true;
  s.wake.notify_all();
  if (s.heartbeat_thread.joinable()) s.heartbeat_thread.join();
  s.note("released " + std::to_string(released) + " runs; " + std::to_string(left) +
         " still inside a tool are left to lease expiry");
  if (s.slot_lost) throw Unavailable("slot " + s.owner.slot.value() + " was lost");
}

void Process::request_stop() {
  state_->stopping.store(true);
}

const ledger::Owner& Process::owner() const {
  return state_->owner;
}

std::vector<TimelineEvent> Process::timeline() const {
  std::lock_guard lock(state_->mu);
  return state_->timeline;
}

ledger::Ledger& Process::ledger() {
  return state_->ledger;
}
transcript::Store& Process::store() {
  return state_->store;
}

}  // namespace runledger::boot
