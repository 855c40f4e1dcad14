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
#include "coordinator/rollback.h"
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
        pool(pool_options(database_url, options)),
        recorder(pool),
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

  static pg::Pool::Options pool_options(const std::string& url, const Options& o) {
    pg::Pool::Options p;
    p.url = url;
    p.size = o.threads + 2;
    p.lock_timeout = o.lock_timeout;
    return p;
  }

  static Options checked(Options o) {
    if (o.threads < 1) throw InvalidArgument("an executor needs at least one thread");
    if (o.lease_ttl.count() < 3) throw InvalidArgument("an executor's lease_ttl is at least 3 ms");
    return o;
  }

  std::optional<ClaimedInstance> claim();
  // Replays the claimed instance and records the outcome; a transient database failure on the
  // way is no outcome: the instance is retried later (retry_later).
  void replay(ClaimedInstance claimed);
  void replay_held(ClaimedInstance claimed, const std::shared_ptr<std::atomic<bool>>& lost);
  // The replay of `instance_id` at `generation` met `failure`: it waits out a backoff that grows
  // with each such replay in a row here, then any executor may claim it. If the database does
  // not take even that, the instance is left to its lease.
  void retry_later(const std::string& instance_id, Generation generation,
                   const Unavailable& failure);
  // Runs the compensations the instance still owes, and ends it (or suspends it until a
  // compensation's retry is due).
  void roll_back(const std::string& instance_id, Generation generation, std::int64_t event_seq,
                 const json& rollback, const std::atomic<bool>& lost);
  // Records how a replay ended: suspended at some steps, complete, or errored / terminated.
  // False when the instance was taken over meanwhile.
  bool record_end(const std::string& instance_id, Generation generation, std::int64_t event_seq,
                  const std::optional<Suspended>& suspended, const std::string& current_step,
                  const std::string& status, const json& output, const json& error);
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
  StepRecorder recorder;  // every replay's step records, batched
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
  // The due time one idle worker sleeps until (the others wait for notifications), and whether
  // that worker left before it, so that another takes its place. Guarded by mu.
  std::optional<std::chrono::steady_clock::time_point> timed_wake;
  bool retime = false;
  // Instances being replayed: id -> (generation, lost flag). Guarded by mu.
  struct Held {
    Generation generation;
    std::shared_ptr<std::atomic<bool>> lost;
  };
  std::map<std::string, Held> held;
  // Replays in a row that met a transient failure, per instance (the backoff's exponent). An
  // instance leaves it when a replay of it here ends otherwise. Guarded by mu.
  std::map<std::string, int> unavailable_streaks;
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
  c.rollback = json_from(row[8]);
  const json steps = json_from(row[9]);
  for (const auto& s : steps) c.steps[s["step_key"].get<std::string>()] = s;
  return c;
}

void Executor::State::replay(ClaimedInstance claimed) {
  const std::string instance_id = claimed.instance_id;
  const Generation generation = claimed.generation;
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
  try {
    replay_held(std::move(claimed), lost);
  } catch (const Unavailable& e) {
    retry_later(instance_id, generation, e);
    return;
  }
  std::lock_guard lock(mu);
  unavailable_streaks.erase(instance_id);
}

void Executor::State::retry_later(const std::string& instance_id, Generation generation,
                                  const Unavailable& failure) {
  int streak = 0;
  {
    std::lock_guard lock(mu);
    // Bounded: instances that moved on to other executors would otherwise stay here forever.
    if (unavailable_streaks.size() > 4096) unavailable_streaks.clear();
    streak = ++unavailable_streaks[instance_id];
  }
  const auto delay = options.unavailable_backoff.delay(streak);
  const std::string cause = failure.details().value("cause", "unavailable");
  try {
    auto conn = pool.acquire();
    pqxx::nontransaction tx(*conn);
    if (pg::exec(tx, sql::kRetryLater, instance_id, generation.value(),
                 static_cast<std::int64_t>(delay.count()), cause)
            .empty()) {
      spdlog::warn("coordinator {}: instance {}: {}; it was taken over or ended meanwhile", id,
                   instance_id, failure.what());
      return;
    }
    spdlog::warn("coordinator {}: instance {}: {}; due again in {} ms", id, instance_id,
                 failure.what(), delay.count());
  } catch (const std::exception& e) {
    spdlog::warn("coordinator {}: instance {}: {}; left to its lease ({})", id, instance_id,
                 failure.what(), e.what());
  }
}

void Executor::State::replay_held(ClaimedInstance claimed,
                                  const std::shared_ptr<std::atomic<bool>>& lost) {
  const Registration* registration = registry.find(claimed.workflow);
  if (!registration || !registration->workflow) {
    throw std::logic_error("claimed an instance of a workflow this executor cannot run");
  }
  const std::string instance_id = claimed.instance_id;
  const json input = std::move(claimed.input);
  const Generation generation = claimed.generation;
  const std::int64_t event_seq = claimed.event_seq;
  if (!claimed.rollback.is_null()) {
    roll_back(instance_id, generation, event_seq, claimed.rollback, *lost);
    return;
  }
  Replay replay(pool, recorder, ledger, registry, options, std::move(claimed), *lost);
  json output;
  json error;
  std::optional<Suspended> suspended;
  std::optional<Unavailable> unavailable;
  try {
    output = registration->workflow->run(input, replay.root());
  } catch (const Suspended& s) {
    suspended = s;
  } catch (const FencedError& e) {
    spdlog::warn("coordinator {}: {}", id, e.what());
    return;
  } catch (const Unavailable& e) {
    // The database, not the workflow, failed (even outside a step call).
    unavailable = e;
  } catch (const Error& e) {
    error = {{"message", e.what()}, {"step", replay.current_step()}, {"kind", "workflow"}};
  } catch (const StepError& e) {
    error = {{"message", e.what()}, {"step", e.step_key()}, {"kind", e.kind()}};
  } catch (const NonDeterminism& e) {
    error = {{"message", e.what()}, {"step", e.step_key()}, {"kind", "non_determinism"}};
  } catch (const std::exception& e) {
    error = {{"message", e.what()}, {"step", replay.current_step()}, {"kind", "workflow"}};
  }
  if (replay.fenced()) return;
  if (unavailable) throw *unavailable;
  // Workflow code caught the failure and went on (or ended): what it did next is not the
  // workflow's outcome either.
  if (const auto met = replay.unavailable()) throw *met;
  if (const auto fatal = replay.fatal()) {
    error = *fatal;
    suspended.reset();
  }
  if (!suspended && !error.is_null() && replay.has_compensations()) {
    // The failure is recorded first: a process killed during the rollback leaves it to the next
    // claim, which continues it instead of replaying the workflow.
    const json rollback = {{"reason", "failed"}, {"error", error}};
    {
      auto conn = pool.acquire();
      pqxx::nontransaction tx(*conn);
      if (pg::exec(tx, sql::kBeginRollback, instance_id, generation.value(), rollback.dump())
              .empty()) {
        spdlog::warn("coordinator {}: instance {} was taken over before its rollback began", id,
                     instance_id);
        return;
      }
    }
    after_journal_write();
    roll_back(instance_id, generation, event_seq, rollback, *lost);
    return;
  }
  record_end(instance_id, generation, event_seq, suspended, replay.current_step(),
             error.is_null() ? "complete" : "errored", output, error);
}

void Executor::State::roll_back(const std::string& instance_id, Generation generation,
                                std::int64_t event_seq, const json& rollback,
                                const std::atomic<bool>& lost) {
  std::optional<RollbackEnd> end;
  std::optional<Suspended> suspended;
  try {
    end = coordinator::roll_back(pool, registry, instance_id, generation, lost);
  } catch (const Suspended& s) {
    suspended = s;
  } catch (const FencedError& e) {
    spdlog::warn("coordinator {}: {}", id, e.what());
    return;
  }
  const bool terminating = rollback.value("reason", "") == "terminate";
  json error = terminating ? json{{"message", "terminated by " + rollback.value("by", "")},
                                  {"kind", "terminated"}}
                           : rollback.value("error", json::object());
  if (end) {
    error["rollback"] = end->to_json();
    if (end->state != "complete") {
      spdlog::error("coordinator {}: instance {}: {}", id, instance_id, end->message);
    }
  }
  const std::string step = suspended ? suspended->step_keys.front() : end->step.value_or("");
  record_end(instance_id, generation, event_seq, suspended, step,
             terminating ? "terminated" : "errored", json(), error);
}

bool Executor::State::record_end(const std::string& instance_id, Generation generation,
                                 std::int64_t event_seq, const std::optional<Suspended>& suspended,
                                 const std::string& current_step, const std::string& status,
                                 const json& output, const json& error) {
  auto conn = pool.acquire();
  pqxx::nontransaction tx(*conn);
  pqxx::result rows;
  const std::optional<std::string> step =
      current_step.empty() ? std::nullopt : std::optional<std::string>(current_step);
  if (suspended) {
    const json keys = suspended->step_keys;
    rows = pg::exec(tx, sql::kSuspend, instance_id, generation.value(), event_seq,
                    pg::nullable(step), keys.dump());
  } else {
    // An errored instance has no output.
    const auto output_text = error.is_null() ? json_text(output) : std::nullopt;
    const auto error_text = json_text(error);
    rows = pg::exec(tx, sql::kFinish, instance_id, generation.value(), status,
                    pg::nullable(output_text), pg::nullable(error_text), pg::nullable(step));
  }
  if (rows.empty()) {
    spdlog::warn("coordinator {}: instance {} was taken over before generation {} recorded its end",
                 id, instance_id, generation.value());
    return false;
  }
  after_journal_write();
  return true;
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
      std::lock_guard held_lock(mu);
      for (const auto& [instance, flag] : flags) {
        if (kept.contains(instance)) continue;
        // A replay that ended since the snapshot released its lease itself: not lost.
        const auto it = held.find(instance);
        if (it == held.end() || it->second.lost != flag) continue;
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
  // The due time is measured from the query's start: the wait is too.
  const auto asked = std::chrono::steady_clock::now();
  try {
    auto conn = pool.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows = pg::exec(tx, sql::kNextDue, names);
    if (!rows.empty() && !rows[0][0].is_null()) {
      const std::int64_t due_in = rows[0][0].as<std::int64_t>();
      // Due now but not claimable (another executor holds it, or a claim raced ours): look again
      // shortly. Else wake when it is due (rounded up: waking early finds nothing).
      wait_ms = due_in <= 0 ? 20 : std::min(due_in, wait_ms);
    }
  } catch (const std::exception& e) {
    spdlog::error("coordinator {}: looking for due instances: {}", id, e.what());
  }
  auto until = asked + std::chrono::milliseconds(wait_ms);
  std::unique_lock lock(mu);
  // One idle worker sleeps until the earliest due time; the others until a notification or the
  // poll. Woken all at once, they would all claim, and on 2 cores the losers' queries slow the
  // winner's replay (the wake latency of a due sleep).
  bool timed = false;
  if (wait_ms < options.poll_interval.count()) {
    if (!timed_wake || until < *timed_wake) {
      timed_wake = until;
      timed = true;
    } else {
      until = asked + options.poll_interval;
    }
  }
  bool woken = false;
  while (!stop && std::chrono::steady_clock::now() < until) {
    if (take_wakeup()) {
      woken = true;
      break;
    }
    if (!timed && retime) {  // the timed worker left early: recompute, and take its place
      retime = false;
      break;
    }
    work.wait_until(
        lock, std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(200)));
  }
  if (timed && timed_wake == until) {
    timed_wake.reset();
    if (woken) {
      retime = true;
      lock.unlock();
      work.notify_one();
    }
  }
}

void Executor::State::worker_loop() {
  while (!stop) {
    bool worked = false;
    try {
      if (auto claimed = claim()) {
        // More may be due (a burst, or several at one time): another idle worker looks too.
        add_wakeup();
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
  // Instances pinned to versions this executor does not run wait for an executor that does:
  // say so, rather than leave them to look stuck.
  try {
    auto conn = s.pool.acquire();
    pqxx::nontransaction tx(*conn);
    for (const auto& row : pg::exec(tx, sql::kOtherVersions, s.names)) {
      spdlog::warn(
          "coordinator {}: {} unfinished instances of workflow {} are pinned to version {}, which "
          "this executor does not run; they wait for an executor that does",
          s.id, row[2].as<std::int64_t>(), row[0].as<std::string>(), row[1].as<int>());
    }
  } catch (const std::exception& e) {
    spdlog::warn("coordinator {}: looking for instances of other versions: {}", s.id, e.what());
  }
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
