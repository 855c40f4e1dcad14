// The executor: claims due instances, replays them, and records how each replay ended; keeps
// the leases of the instances it is replaying; sleeps on NOTIFY runledger_wf and the earliest
// due time.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "coordinator/coordinator.h"
#include "coordinator/replay.h"
#include "coordinator/rows.h"
#include "coordinator/statements.h"
#include "errors/errors.h"

namespace runledger::coordinator {

struct Executor::State {
  State(std::string url, const Registry& r, std::string executor_id, Options o, ledger::Options lo)
      : database_url(std::move(url)),
        registry(r),
        id(std::move(executor_id)),
        options(checked(o)),
        pool(database_url, options.threads + 2),
        ledger(pool, lo),
        names(runnable(registry)) {}

  // {name, version} of each workflow this executor runs: an instance started on another version
  // is left for an executor that has it (it stays visible, queued or waiting).
  static std::string runnable(const Registry& registry) {
    json out = json::array();
    for (const auto& name : registry.runnable_names()) {
      out.push_back({{"name", name}, {"version", registry.find(name)->version}});
    }
    return out.dump();
  }

  static Options checked(Options o) {
    if (o.threads < 1) throw InvalidArgument("an executor needs at least one thread");
    if (o.lease_ttl.count() < 3) throw InvalidArgument("an executor's lease_ttl is at least 3 ms");
    return o;
  }

  std::optional<ClaimedInstance> claim();
  // Replays the claimed instance and records the outcome.
  void replay(ClaimedInstance claimed);
  // Until `quit` or stop.
  void heartbeat_loop(const std::atomic<bool>& quit);
  void listen_loop();
  void worker_loop();
  // Waits until a NOTIFY, the earliest due time, poll_interval, or a stop.
  void wait_for_work();

  std::string database_url;
  const Registry& registry;
  std::string id;
  Options options;
  pg::Pool pool;
  ledger::Ledger ledger;
  std::string names;  // JSON array of the runnable workflows' {name, version}

  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable wake;  // the heartbeat's
  std::condition_variable work;  // idle workers'. Both on mu
  // Notifications not yet acted on, each waking one idle worker (not all of them: a creation
  // is one instance to claim, and a herd of claims would compete for the cores with the one that
  // matters). At most `threads`. Guarded by mu.
  int wakeups = 0;
  void add_wakeup() {
    {
      std::lock_guard lock(mu);
      wakeups = std::min(wakeups + 1, options.threads);
    }
    work.notify_one();
  }
  // Instances being replayed: id -> (generation, lost flag). Guarded by mu.
  struct Held {
    Generation generation;
    std::shared_ptr<std::atomic<bool>> lost;
  };
  std::map<std::string, Held> held;
};

std::optional<ClaimedInstance> Executor::State::claim() {
  auto conn = pool.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows =
      pg::exec(tx, sql::kClaim, id, names, static_cast<std::int64_t>(options.lease_ttl.count()));
  if (rows.empty()) return std::nullopt;
  const auto& row = rows[0];
  ClaimedInstance c;
  c.instance_id = row[0].as<std::string>();
  c.workflow = row[1].as<std::string>();
  c.version = row[2].as<int>();
  c.input = json_from(row[3]);
  c.generation = Generation(row[4].as<std::int64_t>());
  c.event_seq = row[5].as<std::int64_t>();
  c.restarts = row[6].as<int>();
  c.deadline_in_ms = row[7].as<std::int64_t>();
  const json steps = json_from(row[8]);
  for (const auto& s : steps) c.steps[s["step_key"].get<std::string>()] = s;
  return c;
}

void Executor::State::replay(ClaimedInstance claimed) {
  const Registration* registration = registry.find(claimed.workflow);
  if (!registration || !registration->workflow) {
    throw std::logic_error("claimed an instance of a workflow this executor cannot run");
  }
  const std::string instance_id = claimed.instance_id;
  const json input = std::move(claimed.input);
  const Generation generation = claimed.generation;
  const std::int64_t event_seq = claimed.event_seq;
  auto lost = std::make_shared<std::atomic<bool>>(false);
  {
    std::lock_guard lock(mu);
    held.insert_or_assign(instance_id, Held{generation, lost});
  }
  struct Release {
    State& s;
    const std::string& id;
    ~Release() {
      std::lock_guard lock(s.mu);
      s.held.erase(id);
    }
  } release{*this, instance_id};

  Replay replay(pool, ledger, options, std::move(claimed), *lost);
  json output;
  json error;
  std::optional<std::string> suspended_at;
  try {
    output = registration->workflow->run(input, replay);
  } catch (const Suspended& s) {
    suspended_at = s.step_key;
  } catch (const FencedError& e) {
    spdlog::warn("coordinator {}: {}", id, e.what());
    return;
  } catch (const pqxx::broken_connection& e) {
    // The database, not the workflow, failed: leave the instance to its lease's expiry and the
    // next claim, instead of recording an error that is not the workflow's.
    spdlog::warn("coordinator {}: instance {}: {}", id, instance_id, e.what());
    return;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unavailable) {
      spdlog::warn("coordinator {}: instance {}: {}", id, instance_id, e.what());
      return;
    }
    error = {{"message", e.what()}, {"step", replay.current_step()}, {"kind", "workflow"}};
  } catch (const StepError& e) {
    error = {{"message", e.what()}, {"step", e.step_key()}, {"kind", e.kind()}};
  } catch (const NonDeterminism& e) {
    error = {{"message", e.what()}, {"step", e.step_key()}, {"kind", "non_determinism"}};
  } catch (const std::exception& e) {
    error = {{"message", e.what()}, {"step", replay.current_step()}, {"kind", "workflow"}};
  }
  if (replay.fenced()) return;
  if (replay.fatal()) {
    error = *replay.fatal();
    suspended_at.reset();
  }
  auto conn = pool.acquire();
  pqxx::nontransaction tx(*conn);
  pqxx::result rows;
  const std::optional<std::string> step = replay.current_step().empty()
                                              ? std::nullopt
                                              : std::optional<std::string>(replay.current_step());
  if (suspended_at) {
    rows = pg::exec(tx, sql::kSuspend, instance_id, generation.value(), event_seq, *suspended_at);
  } else if (error.is_null()) {
    rows = pg::exec(tx, sql::kFinish, instance_id, generation.value(), std::string("complete"),
                    output.dump(), nullptr, pg::nullable(step));
  } else {
    rows = pg::exec(tx, sql::kFinish, instance_id, generation.value(), std::string("errored"),
                    nullptr, error.dump(), pg::nullable(step));
  }
  if (rows.empty()) {
    spdlog::warn("coordinator {}: instance {} was taken over before generation {} recorded its end",
                 id, instance_id, generation.value());
    return;
  }
  after_journal_write();
}

void Executor::State::heartbeat_loop(const std::atomic<bool>& quit) {
  const auto every = options.lease_ttl / 3;
  auto next_beat = std::chrono::steady_clock::now() + every;
  std::unique_lock lock(mu);
  while (!stop && !quit) {
    wake.wait_for(lock, std::min<std::chrono::milliseconds>(every, std::chrono::milliseconds(200)));
    if (stop || quit) return;
    if (std::chrono::steady_clock::now() < next_beat) continue;
    next_beat = std::chrono::steady_clock::now() + every;
    json leases = json::array();
    std::map<std::string, std::shared_ptr<std::atomic<bool>>> flags;
    for (const auto& [instance, h] : held) {
      leases.push_back({{"instance_id", instance}, {"generation", h.generation.value()}});
      flags[instance] = h.lost;
    }
    if (flags.empty()) continue;
    lock.unlock();
    try {
      auto conn = pool.acquire();
      pqxx::nontransaction tx(*conn);
      std::set<std::string> kept;
      for (const auto& row : pg::exec(tx, sql::kHeartbeat, leases.dump(),
                                      static_cast<std::int64_t>(options.lease_ttl.count()))) {
        kept.insert(row[0].as<std::string>());
      }
      for (const auto& [instance, flag] : flags) {
        if (kept.contains(instance)) continue;
        spdlog::warn("coordinator {}: lost instance {}; its replay stops", id, instance);
        *flag = true;
      }
    } catch (const std::exception& e) {
      spdlog::error("coordinator {}: heartbeat failed: {}", id, e.what());
    }
    lock.lock();
  }
}

void Executor::State::listen_loop() {
  while (!stop) {
    try {
      pqxx::connection conn(database_url);
      struct Receiver : pqxx::notification_receiver {
        Receiver(pqxx::connection& c, State& s)
            : notification_receiver(c, "runledger_wf"), state(s) {}
        void operator()(const std::string&, int) override { state.add_wakeup(); }
        State& state;
      } receiver(conn, *this);
      // Anything that happened before LISTEN took effect is found by the workers' next look.
      add_wakeup();
      while (!stop) conn.await_notification(0, 200'000);
    } catch (const std::exception& e) {
      if (stop) return;
      spdlog::warn("coordinator {}: LISTEN runledger_wf: {}; polling meanwhile", id, e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
}

void Executor::State::wait_for_work() {
  const auto take_wakeup = [&] {
    if (wakeups == 0) return false;
    --wakeups;
    return true;
  };
  {
    std::lock_guard lock(mu);
    if (take_wakeup()) return;
  }
  std::int64_t wait_ms = options.poll_interval.count();
  try {
    auto conn = pool.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows = pg::exec(tx, sql::kNextDue, names);
    if (!rows.empty() && !rows[0][0].is_null()) {
      // Overdue but not claimable (another executor holds it): look again shortly.
      wait_ms = std::clamp<std::int64_t>(rows[0][0].as<std::int64_t>(), 20, wait_ms);
    }
  } catch (const std::exception& e) {
    spdlog::error("coordinator {}: looking for due instances: {}", id, e.what());
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  std::unique_lock lock(mu);
  while (!stop && !take_wakeup() && std::chrono::steady_clock::now() < until) {
    work.wait_until(
        lock, std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(200)));
  }
}

void Executor::State::worker_loop() {
  while (!stop) {
    bool worked = false;
    try {
      if (auto claimed = claim()) {
        replay(std::move(*claimed));
        worked = true;
      }
    } catch (const std::exception& e) {
      spdlog::error("coordinator {}: {}", id, e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    if (!worked) wait_for_work();
  }
}

Executor::Executor(std::string database_url, const Registry& registry, std::string id,
                   Options options, ledger::Options ledger_options)
    : state_(std::make_unique<State>(std::move(database_url), registry, std::move(id), options,
                                     ledger_options)) {}

Executor::~Executor() = default;

bool Executor::run_one() {
  auto& s = *state_;
  auto claimed = s.claim();
  if (!claimed) return false;
  std::atomic<bool> quit{false};
  std::jthread heartbeat([&s, &quit] { s.heartbeat_loop(quit); });
  struct StopHeartbeat {
    State& s;
    std::atomic<bool>& quit;
    ~StopHeartbeat() {
      quit = true;
      s.wake.notify_all();
    }
  } stop_heartbeat{s, quit};
  s.replay(std::move(*claimed));
  return true;
}

void Executor::run() {
  auto& s = *state_;
  spdlog::info("coordinator {}: {} threads, workflows: {}", s.id, s.options.threads, s.names);
  std::vector<std::jthread> threads;
  threads.emplace_back([&s] { s.listen_loop(); });
  const std::atomic<bool> never{false};
  threads.emplace_back([&s, &never] { s.heartbeat_loop(never); });
  for (int i = 0; i < s.options.threads; ++i) threads.emplace_back([&s] { s.worker_loop(); });
  threads.clear();  // joins: every loop ends on stop
  spdlog::info("coordinator {}: stopped", s.id);
}

void Executor::request_stop() {
  state_->stop = true;  // the loops look at it at least every 200 ms
}

}  // namespace runledger::coordinator
