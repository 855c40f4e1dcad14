// The coordinator: a durable workflow engine on the ledger's PostgreSQL.
//
// Contract:
//  - A workflow is a class registered under a name and a version; run(input, step) is replayed
//    from the top whenever its instance runs, against the instance's step record. Every step is
//    identified by `name#count` (the count of that name's calls so far in this execution), so
//    reordering differently named steps is allowed; a replayed call whose kind (run, sleep, wait,
//    spawn) differs from the one recorded under its key throws NonDeterminism naming the step.
//  - A completed step is never run again (invariant 9): its JSON value is returned, or its final
//    error re-thrown as StepError, from the record. A step body runs at least once and, when its
//    completion is recorded, exactly as many times as the record says (a process killed inside a
//    body leaves that attempt unrecorded, and the body runs again).
//  - Retries: the step's config (limit, delay, backoff; per-attempt timeout) is stored with the
//    step's first record and wins on replay. NonRetryable ends them. The timeout is cooperative:
//    the body's stop token is triggered, and a value returned after the timeout is discarded.
//  - Sleeps store their absolute wake time; waits store (type, match, timeout) and take the
//    oldest unconsumed event of that type whose payload contains `match`; events sent before
//    the wait exists are kept until one takes them, and each is taken by exactly one wait. A
//    wait's timeout is its final error (EventTimeout), re-thrown on replay (invariant 10).
//  - all() runs branches side by side, each on its own thread with its own Step, whose keys are
//    "<name>#<count>/<branch>/<key>" (a deterministic identity per branch). Every branch is
//    driven as far as it can go; the call returns once all have ended, with their values in
//    order, or re-throws the error of the lowest-numbered failed branch. While a branch waits the
//    instance waits, as for any step.
//  - wait_any() takes the oldest unconsumed event matching any of its alternatives, in one
//    statement: the wait that wins is recorded with the event and the others are cancelled with
//    it, so an event that arrives later for them stays buffered for a later wait.
//  - Compensation: a run step may name a compensation handler (registered by name at startup).
//    When the instance fails, or is terminated with rollback, the handlers of its succeeded steps
//    run in reverse record order, each attempt journaled and retried like a step, each handler run
//    to success exactly once in the record. A handler no longer registered, or one that fails
//    finally, stops the rollback, and the instance's error names it.
//  - spawn() dispatches a child run with dispatch key "wf:<instance>:<step key>" and the
//    instance as its parent: a repeated spawn finds the same child, and the child's terminal
//    record delivers a "run-finished" event ({run_id, status, result}) to the instance.
//  - A sleep or wait that is not yet due records itself and unwinds (the workflow's run() is
//    left by an exception that is not a std::exception: let unknown exceptions pass): a waiting
//    instance holds no thread and no memory; a due deadline or an event replays it.
//  - Instances are leased and fenced like runs: a claim bumps the generation, every write checks
//    it, and a refused write stops that replay (FencedError). An instance past its maximum
//    duration is errored, naming the step it was in.
//  - A transient database failure (pg/: Unavailable) is never an instance's outcome: a replay
//    that met one, even where workflow code caught it as a std::exception, records nothing of it
//    and ends like a fenced one; its instance waits a bounded, jittered backoff and is then due
//    for any executor (history: "database unavailable"). A step *body's* own database error is
//    that body's failed attempt, under its retry policy, like any other exception of the body.
//  - All deadlines are on the database clock (runledger_now(): tests move it forward).
//  - An executor runs an instance only on the version it was created with; an instance of a
//    version no executor registers stays queued or waiting, visibly, instead of running against
//    other code.
//  - Every write of the engine is one statement (one commit); a completed step costs one, shared
//    with the step records of the executor's other replays written at the same moment (group
//    commit), each still fenced on its own instance's generation.
//
// Thread-safety: Registry is immutable once an Executor or Coordinator uses it. Coordinator is
// thread-safe. Executor runs its own threads; its public methods may be called from any thread.
// A Step belongs to the thread running the workflow (or its branch of all(): each branch gets a
// Step of its own, so branches must be safe to run side by side). Workflow objects and
// compensation handlers serve several instances at once, one per executor thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "errors/errors.h"
#include "ids/ids.h"
#include "ledger/ledger.h"
#include "paging/paging.h"
#include "pg/pg.h"

namespace runledger::coordinator {

using nlohmann::json;

enum class InstanceStatus { queued, running, waiting, paused, complete, errored, terminated };
std::string_view to_string(InstanceStatus status);
InstanceStatus parse_instance_status(std::string_view name);  // throws InvalidArgument

// ---------------------------------------------------------------------------------------------
// Steps as recorded

// What a step call is; a replayed call of another kind than its record's is non-determinism.
enum class StepKind { run, sleep, wait, wait_any, spawn };
std::string_view to_string(StepKind kind);
StepKind parse_step_kind(std::string_view name);  // throws InvalidArgument

// pending: not final yet (a sleep or wait not due, a run step between retries).
enum class StepState { pending, succeeded, failed };
std::string_view to_string(StepState state);
StepState parse_step_state(std::string_view name);  // throws InvalidArgument

// Why a step ended in its final error: its body's last attempt failed, threw NonRetryable, timed
// out, or returned too large a value; its wait timed out; or the execution reached the step cap
// or the instance's deadline in it.
enum class StepErrorKind {
  failed,
  non_retryable,
  timeout,
  value_too_large,
  event_timeout,
  step_limit,
  deadline
};
std::string_view to_string(StepErrorKind kind);
StepErrorKind parse_step_error_kind(std::string_view name);  // throws InvalidArgument

// ---------------------------------------------------------------------------------------------
// What a workflow's steps throw: runledger::Error outcomes (errors/errors.h), so that the CLI and
// the server map them where they map every other outcome.

// Thrown by a step body to end its retries at once (code step_failed).
class NonRetryable : public Error {
 public:
  explicit NonRetryable(const std::string& message) : Error(ErrorCode::step_failed, message) {}
};

// A step's final error (its attempts exhausted, NonRetryable, its value too large, a wait's
// timeout), thrown when it happens and re-thrown from the record on every replay. Code
// step_failed; details {"step", "kind"}.
class StepError : public Error {
 public:
  StepError(std::string step_key, StepErrorKind kind, const std::string& message)
      : Error(ErrorCode::step_failed, message,
              {{"step", step_key}, {"kind", std::string(to_string(kind))}}),
        step_key_(std::move(step_key)),
        kind_(kind) {}
  const std::string& step_key() const { return step_key_; }
  StepErrorKind kind() const { return kind_; }

 private:
  std::string step_key_;
  StepErrorKind kind_;
};

// A wait's timeout (kind event_timeout).
class EventTimeout : public StepError {
 public:
  EventTimeout(std::string step_key, const std::string& message)
      : StepError(std::move(step_key), StepErrorKind::event_timeout, message) {}
};

// A replayed call whose kind differs from the step recorded under its key. Ends the instance.
// Code nondeterministic; details {"step"}.
class NonDeterminism : public Error {
 public:
  NonDeterminism(std::string step_key, const std::string& message)
      : Error(ErrorCode::nondeterministic, message, {{"step", step_key}}),
        step_key_(std::move(step_key)) {}
  const std::string& step_key() const { return step_key_; }

 private:
  std::string step_key_;
};

// ---------------------------------------------------------------------------------------------
// Steps

enum class Backoff { constant, linear, exponential };

struct StepConfig {
  // Attempts after the first; 0: no retries.
  int retries = 0;
  // Delay before retry n (1-based): delay, delay * n, or delay * 2^(n-1).
  std::chrono::milliseconds delay{1'000};
  Backoff backoff = Backoff::exponential;
  // Per attempt; nullopt: none.
  std::optional<std::chrono::milliseconds> timeout;
  // A compensation handler (Registry::add_compensation) that undoes this step when the instance
  // fails or is terminated with rollback; stored with the step. Run steps only.
  std::optional<std::string> compensation;
};

struct EventWait {
  std::string type;
  // The event's payload must contain this object (PostgreSQL `@>`).
  json match = json::object();
  // Required: nothing waits unbounded.
  std::chrono::milliseconds timeout{0};
};

// One alternative of a wait_any.
struct EventMatch {
  std::string type;
  json match = json::object();
};

// The alternative of a wait_any that took an event, and the event's payload.
struct AnyEvent {
  std::size_t index = 0;
  json payload;
};

class Step;
// A branch of Step::all: its value, computed with the branch's own Step.
using Branch = std::function<json(Step&)>;

// The workflow's handle on its instance during one execution.
class Step {
 public:
  virtual ~Step() = default;
  virtual const InstanceId& instance_id() const = 0;
  // Memoized: the body's value, or its final error.
  virtual json run(std::string_view name, const StepConfig& config,
                   const std::function<json(std::stop_token)>& body) = 0;
  json run(std::string_view name, const std::function<json(std::stop_token)>& body) {
    return run(name, StepConfig{}, body);
  }
  virtual void sleep(std::string_view name, std::chrono::milliseconds duration) = 0;
  // `at` is on the database clock, as milliseconds since the Unix epoch.
  virtual void sleep_until(std::string_view name, std::int64_t at_unix_ms) = 0;
  // The payload of the event the wait took; EventTimeout when none came in time.
  virtual json wait_for_event(std::string_view name, const EventWait& wait) = 0;
  // The first of several event waits to be satisfied, or EventTimeout after `timeout`.
  virtual AnyEvent wait_any(std::string_view name, const std::vector<EventMatch>& events,
                            std::chrono::milliseconds timeout) = 0;
  // Runs the branches side by side; their values in order (see the contract above).
  virtual std::vector<json> all(std::string_view name, const std::vector<Branch>& branches) = 0;
  // The child run's id. `request.dispatch_key` and `request.parent_instance` are set here.
  virtual RunId spawn(std::string_view name, ledger::DispatchRequest request) = 0;
};

class Workflow {
 public:
  virtual ~Workflow() = default;
  virtual json run(const json& input, Step& step) = 0;
};

struct Registration {
  std::string name;
  int version = 1;
  // Invariant 10: an instance that runs longer is errored.
  std::chrono::seconds max_duration{24 * 3600};
  // Null in a registry that only creates and reads instances (a client); an Executor runs only
  // the registrations that have one.
  std::shared_ptr<Workflow> workflow;
};

// What a compensation handler undoes: the step, and the value it recorded.
struct UndoRequest {
  const InstanceId& instance_id;
  const std::string& step_key;  // with instance_id, a key for making the undo idempotent
  const json& output;
  int attempt = 1;
};

// Undoes a succeeded step. Registered by name; a step names it in StepConfig::compensation. Must
// be idempotent: a process killed inside it runs it again.
struct Compensation {
  std::string name;
  // Retries of the handler (its own timeout and backoff); a final failure stops the rollback.
  StepConfig retry;
  std::function<void(const UndoRequest& request, std::stop_token)> undo;
};

class Registry {
 public:
  // Throws InvalidArgument for a name registered twice or an empty name.
  void add(Registration registration);
  void add_compensation(Compensation compensation);
  const Registration* find(std::string_view name) const;
  const Compensation* find_compensation(std::string_view name) const;
  std::vector<std::string> names() const;
  // The names of registrations with a workflow object.
  std::vector<std::string> runnable_names() const;

 private:
  std::map<std::string, Registration, std::less<>> workflows_;
  std::map<std::string, Compensation, std::less<>> compensations_;
};

// ---------------------------------------------------------------------------------------------
// Instances

struct Instance {
  InstanceId instance_id{""};
  std::string workflow;
  int version = 0;
  json input;
  InstanceStatus status = InstanceStatus::queued;
  json output;  // null until complete
  json error;   // {"message", "step", "kind"} once errored
  Generation generation{0};
  std::optional<std::string> owner;
  std::optional<std::string> wake_at;  // timestamps: PostgreSQL text, UTC
  std::string deadline_at;
  std::optional<std::string> current_step;
  std::string created_at;
  std::string updated_at;
  std::optional<std::string> finished_at;
  // Set once the instance began rolling back: {"reason": "failed" | "terminate", ...}.
  json rollback;
};
json to_json(const Instance& instance);

struct Created {
  Instance instance;
  bool created;  // false: the id existed; `instance` is the existing one, unchanged
};

struct StepRecord {
  std::string step_key;
  StepKind kind = StepKind::run;
  StepState state = StepState::pending;
  int attempts = 0;
  json config;
  json output;
  json error;
  std::optional<std::string> due_at;
  Generation generation{0};
};

struct HistoryEntry {
  std::int64_t id = 0;
  std::string at;
  std::optional<std::int64_t> generation;
  std::string what;
  std::optional<std::string> step_key;
  json detail;
};

struct Options {
  // Instance lease granted by a claim and extended every lease_ttl / 3 while replaying.
  std::chrono::milliseconds lease_ttl{30'000};
  // A step value (JSON text) larger than this is the step's final error.
  std::size_t max_value_bytes = 1 << 20;
  // Step calls per execution; the next one is an error naming it.
  int max_steps = 10'000;
  // Executor threads, each replaying one instance at a time.
  int threads = 4;
  // Threads one all() runs its branches on (more branches take turns).
  std::size_t max_branch_threads = 16;
  // Longest an idle executor waits without a NOTIFY before looking for due instances again.
  std::chrono::milliseconds poll_interval{5'000};
  // How long an executor's statement waits for a row lock before it fails (Unavailable, retried
  // under unavailable_backoff): an instance locked by a wedged session does not hold a thread.
  std::chrono::milliseconds lock_timeout{5'000};
  // The wait before an instance whose replay met a transient database failure is due again; it
  // doubles with each such replay in a row on this executor, up to `most`. (`tries` is not used:
  // such an instance is retried for as long as the failures last, never given up on.)
  pg::Backoff unavailable_backoff{std::chrono::milliseconds(100), std::chrono::milliseconds(5'000)};
};

// The client side: create instances, send events, read them. Needs no executor.
class Coordinator {
 public:
  Coordinator(pg::Pool& pool, const Registry& registry);

  // Idempotent on instance_id. InvalidArgument for an id InstanceId::parse would refuse or a
  // workflow not in the registry.
  Created create(std::string_view workflow, const InstanceId& instance_id, const json& input);
  // Creates up to kMaxBatch instances of one workflow in one statement (one commit), each
  // idempotent on its id like create(); returns how many were new. InvalidArgument (nothing
  // created) for an id InstanceId::parse would refuse, an unknown workflow, or a batch too large.
  static constexpr std::size_t kMaxBatch = 10'000;
  int create_batch(std::string_view workflow,
                   const std::vector<std::pair<InstanceId, json>>& instances);
  // Buffered until a wait takes it; recorded in the history ("event sent") with `by`, who sent
  // it. Idempotent on (instance, dedupe_key): the second send returns false. NotFound for an
  // unknown instance.
  bool send_event(const InstanceId& instance_id, const std::string& type, const json& payload,
                  const std::string& dedupe_key, const std::string& by = "api");
  Instance get(const InstanceId& instance_id);  // NotFound
  // Pages of instances, newest first (created_at, then instance id): all of them, those with a
  // status, those of a workflow; each one statement an index serves from the cursor on (migration
  // 0015). InvalidArgument for a cursor another listing made (or none made), or a limit outside
  // 1-1000 (paging/paging.h).
  paging::Page<Instance> instances(const paging::PageRequest& page);
  paging::Page<Instance> instances_with_status(InstanceStatus status,
                                               const paging::PageRequest& page);
  paging::Page<Instance> instances_of_workflow(std::string_view workflow,
                                               const paging::PageRequest& page);
  // Its steps in record order (an instance has at most Options::max_steps per execution).
  std::vector<StepRecord> steps(const InstanceId& instance_id);  // NotFound
  // Its history, oldest first (by entry id), a page at a time; or all of it.
  paging::Page<HistoryEntry> history(const InstanceId& instance_id,
                                     const paging::PageRequest& page);  // NotFound
  std::vector<HistoryEntry> history(const InstanceId& instance_id);     // NotFound

  // Operator actions, each recorded in the history with `by`. Each takes the instance away from
  // an executor holding it (its next write is refused). NotFound for an unknown instance;
  // Conflict when its status does not allow the action.
  // queued | running | waiting -> paused.
  void pause(const InstanceId& instance_id, const std::string& by);
  // paused -> queued (due at once).
  void resume(const InstanceId& instance_id, const std::string& by);
  // Any unfinished status -> terminated. With rollback, the instance is queued to have the
  // compensations of its succeeded steps run by an executor first, and ends terminated after.
  void terminate(const InstanceId& instance_id, const std::string& by, bool rollback = false);
  // Discards step `step_key` (name#count) and every step recorded after it, and queues the
  // instance (whatever its status) with a fresh deadline: those steps run again, earlier ones
  // are reused. Spawns after a restart dispatch new children. Returns the number of steps
  // discarded. NotFound when the instance has no such step; Conflict when a step before it was
  // compensated (its effect is undone: restart from that step or earlier).
  int restart(const InstanceId& instance_id, const std::string& step_key, const std::string& by);
  // Times out the instance's pending waits named `step` (a name, or a key name#count, within any
  // branch) now: its next replay takes their timeout path (an event already buffered for one is
  // still taken, as at a real timeout). History: "waits expired". Returns how many; NotFound for
  // an unknown instance.
  int expire_waits(const InstanceId& instance_id, const std::string& step, const std::string& by);

 private:
  pg::Pool& pool_;
  const Registry& registry_;
};

// Claims due instances of the registered workflows and replays them.
class Executor {
 public:
  // `id` names this executor in leases and history (e.g. "coordinator-<pid>").
  Executor(std::string database_url, const Registry& registry, std::string id, Options options = {},
           ledger::Options ledger_options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Claims one due instance and replays it until it completes, errors or waits. False when none
  // was due. For tests and tools; run() does this on Options::threads threads.
  bool run_one();
  // Runs until request_stop(): threads claim due instances, woken by NOTIFY on runledger_wf,
  // by the earliest due time, and at the latest every poll_interval.
  void run();
  // Async-signal-safe.
  void request_stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace runledger::coordinator
