// The executor's shared state and its loops, one concept per file: claiming and recording how a
// replay ended (outcomes.cc), keeping the instance leases (leases.cc), waking up for work
// (wakeups.cc), and the worker threads (executor.cc). Private to coordinator/.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "coordinator/coordinator.h"
#include "coordinator/replay.h"
#include "coordinator/step_recorder.h"
#include "errors/errors.h"
#include "ledger/ledger.h"
#include "pg/pg.h"

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

}  // namespace runledger::coordinator
