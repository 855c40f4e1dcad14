// One execution of a workflow against its instance's record: the Step the workflow sees.
// Private to coordinator/.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "coordinator/coordinator.h"
#include "ledger/ledger.h"
#include "pg/pg.h"

namespace runledger::coordinator {

// What a claim hands the replay.
struct ClaimedInstance {
  std::string instance_id;
  std::string workflow;
  int version = 0;
  json input;
  Generation generation{0};
  std::int64_t event_seq = 0;
  int restarts = 0;                 // operator restarts so far: part of keys derived from a step
  std::int64_t deadline_in_ms = 0;  // on the database clock, at the claim
  // Step key -> {kind, state, attempts, config, output, error, due_in_ms}.
  std::map<std::string, json> steps;
};

// Thrown through the workflow when it reaches a step that is not due: the instance waits. Not a
// std::exception, so that workflow code catching those lets it pass.
struct Suspended {
  std::string step_key;
};

class Replay final : public Step {
 public:
  Replay(pg::Pool& pool, ledger::Ledger& ledger, const Options& options, ClaimedInstance claimed,
         const std::atomic<bool>& lost);

  const std::string& instance_id() const override { return claimed_.instance_id; }
  json run(std::string_view name, const StepConfig& config,
           const std::function<json(std::stop_token)>& body) override;
  void sleep(std::string_view name, std::chrono::milliseconds duration) override;
  void sleep_until(std::string_view name, std::int64_t at_unix_ms) override;
  json wait_for_event(std::string_view name, const EventWait& wait) override;
  RunId spawn(std::string_view name, ledger::DispatchRequest request) override;

  // The step the execution was last in ("" before the first).
  const std::string& current_step() const { return current_; }
  // An error that ends the instance whatever the workflow did with it (non-determinism, the
  // deadline, the step cap): {"message", "step", "kind"}.
  const std::optional<json>& fatal() const { return fatal_; }
  // The writer lost the instance: nothing more may be written.
  bool fenced() const { return fenced_; }

 private:
  std::string next_key(std::string_view name);
  const json* record(const std::string& key, std::string_view kind);
  bool due(const json& record) const;
  void check_deadline(const std::string& key);
  void replay_sleep(const std::string& key, const json& record);
  void record_sleep(const std::string& key, std::optional<std::int64_t> until_unix_ms,
                    std::optional<std::int64_t> duration_ms);
  [[noreturn]] void fail_fatal(const std::string& key, const std::string& kind,
                               const std::string& message);
  // Writes a step's state (kRecordStep); returns whether its due time has passed.
  bool record_step(const std::string& key, std::string_view kind, const json& config,
                   std::string_view state, int attempts, const json& output, const json& error,
                   std::optional<std::int64_t> due_in_ms, std::string_view what,
                   const json& detail);
  [[noreturn]] void refused(const std::string& what);
  std::chrono::milliseconds elapsed() const;

  pg::Pool& pool_;
  ledger::Ledger& ledger_;
  const Options& options_;
  ClaimedInstance claimed_;
  const std::atomic<bool>& lost_;
  std::chrono::steady_clock::time_point claimed_at_;
  std::map<std::string, int, std::less<>> counts_;
  int calls_ = 0;
  std::string current_;
  std::optional<json> fatal_;
  bool fenced_ = false;
};

// Hit after every committed journal write (for crash tests): failpoint "coordinator.after_write".
void after_journal_write();

}  // namespace runledger::coordinator
