// One execution of a workflow against its instance's record. Replay holds the record and
// writes its new facts; Scope is the Step a workflow (or one branch of all()) sees, and names
// its steps. Private to coordinator/.
//
// Thread-safety: the branches of all() run on their own threads against one Replay; each branch
// has its own Scope and touches only its own keys, and Replay guards what they share.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/coordinator.h"
#include "coordinator/step_recorder.h"
#include "errors/errors.h"
#include "ledger/ledger.h"
#include "pg/pg.h"

namespace runledger::coordinator {

// A step as the claim found it, or as this replay has recorded it since.
struct RecordedStep {
  StepKind kind = StepKind::run;
  StepState state = StepState::pending;
  int attempts = 0;
  json config;
  json output;
  json error;  // {"message", "kind"} of its last failed attempt or its final error
  // Due that long after the claim (on the claim's clock); nullopt: no due time (due now).
  std::optional<std::int64_t> due_in_ms;
};
// One element of the claim's step array ({step_key, kind, state, ...}).
std::pair<std::string, RecordedStep> recorded_step_from_json(const json& j);

// What a claim hands the replay.
struct ClaimedInstance {
  InstanceId instance_id{""};
  std::string workflow;
  int version = 0;
  json input;
  Generation generation{0};
  std::int64_t event_seq = 0;
  int restarts = 0;                 // operator restarts so far: part of keys derived from a step
  std::int64_t deadline_in_ms = 0;  // on the database clock, at the claim
  json rollback;                    // set: run the compensations instead of the workflow
  std::map<std::string, RecordedStep> steps;  // by step key
};

// Thrown through the workflow when it reaches steps that are not due (several, from the branches
// of all()): the instance waits until the earliest. Not a std::exception, so that workflow code
// catching those lets it pass.
struct Suspended {
  std::vector<std::string> step_keys;
};

class Replay {
 public:
  Replay(pg::Pool& pool, StepRecorder& recorder, ledger::Ledger& ledger, const Registry& registry,
         const Options& options, ClaimedInstance claimed, const std::atomic<bool>& lost);

  // The Step the workflow's run() gets.
  Step& root() { return *root_; }
  const InstanceId& instance_id() const { return claimed_.instance_id; }

  // The step the execution was last in ("" before the first).
  std::string current_step() const;
  // An error that ends the instance whatever the workflow did with it (non-determinism, the
  // deadline, the step cap): {"message", "step", "kind"}.
  std::optional<json> fatal() const;
  // The writer lost the instance: nothing more may be written.
  bool fenced() const { return fenced_; }
  // The first transient database failure (Unavailable) a step call met, whatever the workflow
  // did with the exception: the execution's end then says nothing about the workflow and is not
  // recorded.
  std::optional<Unavailable> unavailable() const;
  // Runs one step call of the workflow (Scope's); an Unavailable it raises is kept for
  // unavailable() on its way out.
  template <class F>
  auto guarded(F&& call) -> decltype(call()) {
    try {
      return call();
    } catch (const Unavailable& e) {
      met_unavailable(e);
      throw;
    }
  }
  // Whether a succeeded step names a compensation (a failure then rolls back).
  bool has_compensations() const;

  // The steps, by key (Scope names them). begin() counts a step call and checks the fence and
  // the step cap.
  void begin(const std::string& key);
  json run(const std::string& key, const StepConfig& config,
           const std::function<json(std::stop_token)>& body);
  void sleep(const std::string& key, std::optional<std::int64_t> until_unix_ms,
             std::optional<std::int64_t> duration_ms);
  // kind wait: the payload; wait_any: {index, payload}.
  json wait(const std::string& key, StepKind kind, const json& alternatives,
            std::int64_t timeout_ms);
  RunId spawn(const std::string& key, ledger::DispatchRequest request);
  std::size_t max_branch_threads() const { return options_.max_branch_threads; }

 private:
  // The record of `key`, checked to be of `kind`; null when there is none. The pointer stays
  // valid (map nodes do not move) and only the branch owning the key writes it.
  const RecordedStep* record(const std::string& key, StepKind kind);
  void remember(const std::string& key, RecordedStep step);
  bool due(const RecordedStep& step) const;
  void check_deadline(const std::string& key);
  void replay_sleep(const std::string& key, const RecordedStep& step);
  [[noreturn]] void fail_fatal(const std::string& key, StepErrorKind kind,
                               const std::string& message);
  // Writes a step's state (through the executor's StepRecorder); returns whether its due time has
  // passed.
  bool record_step(const std::string& key, StepKind kind, const json& config, StepState state,
                   int attempts, const json& output, const json& error,
                   std::optional<std::int64_t> due_in_ms, std::string_view what,
                   const json& detail);
  [[noreturn]] void refused(const std::string& what);
  void met_unavailable(const Unavailable& e);
  std::chrono::milliseconds elapsed() const;

  pg::Pool& pool_;
  StepRecorder& recorder_;
  ledger::Ledger& ledger_;
  const Registry& registry_;
  const Options& options_;
  ClaimedInstance claimed_;
  const std::atomic<bool>& lost_;
  std::chrono::steady_clock::time_point claimed_at_;
  std::unique_ptr<Step> root_;
  mutable std::mutex mu_;  // guards the members below and the shape of claimed_.steps
  int calls_ = 0;
  std::string current_;
  std::optional<json> fatal_;
  std::optional<Unavailable> unavailable_;
  std::atomic<bool> fenced_{false};
};

// The Step of an execution or of one branch: names steps "<prefix><name>#<count>".
class Scope final : public Step {
 public:
  Scope(Replay& replay, std::string prefix) : replay_(replay), prefix_(std::move(prefix)) {}

  const InstanceId& instance_id() const override { return replay_.instance_id(); }
  json run(std::string_view name, const StepConfig& config,
           const std::function<json(std::stop_token)>& body) override;
  void sleep(std::string_view name, std::chrono::milliseconds duration) override;
  void sleep_until(std::string_view name, std::int64_t at_unix_ms) override;
  json wait_for_event(std::string_view name, const EventWait& wait) override;
  AnyEvent wait_any(std::string_view name, const std::vector<EventMatch>& events,
                    std::chrono::milliseconds timeout) override;
  std::vector<json> all(std::string_view name, const std::vector<Branch>& branches) override;
  RunId spawn(std::string_view name, ledger::DispatchRequest request) override;

 private:
  std::string next_key(std::string_view name);

  Replay& replay_;
  std::string prefix_;
  std::map<std::string, int, std::less<>> counts_;
};

// Hit after every committed journal write (for crash tests): failpoint "coordinator.after_write".
void after_journal_write();

}  // namespace runledger::coordinator
