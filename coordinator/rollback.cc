// The rollback of an instance: its compensations, latest step first.
#include "coordinator/rollback.h"

#include "coordinator/attempt.h"
#include "coordinator/replay.h"
#include "coordinator/rows.h"
#include "coordinator/statements.h"
#include "errors/errors.h"

namespace runledger::coordinator {
namespace {

struct Owed {
  std::string step_key;
  std::string handler;
  json output;
  std::optional<StepState> state;  // nullopt: no attempt yet
  int attempts = 0;
  std::optional<std::int64_t> due_in_ms;
};

class Journal {
 public:
  Journal(pg::Pool& pool, const InstanceId& instance_id, Generation generation)
      : pool_(pool), instance_id_(instance_id), generation_(generation) {}

  std::vector<Owed> owed() {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    std::vector<Owed> out;
    for (const auto& row : pg::exec(tx, sql::kCompensable, instance_id_.value())) {
      out.push_back(Owed{
          .step_key = row[0].as<std::string>(),
          .handler = row[1].as<std::string>(),
          .output = json_from(row[2]),
          .state = row[3].is_null() ? std::nullopt
                                    : std::optional<StepState>(parse_step_state(row[3].c_str())),
          .attempts = row[4].as<int>(),
          .due_in_ms = row[5].is_null() ? std::nullopt
                                        : std::optional<std::int64_t>(row[5].as<std::int64_t>()),
      });
    }
    return out;
  }

  // Returns whether the compensation's due time has passed.
  bool record(const Owed& owed, StepState state, int attempts, const json& error,
              std::optional<std::int64_t> due_in_ms, std::string_view what, const json& detail) {
    const auto error_text = json_text(error);
    const auto due_text = int_text(due_in_ms);
    pqxx::result rows;
    {
      auto conn = pool_.acquire();
      pqxx::nontransaction tx(*conn);
      rows = pg::exec(tx, sql::kRecordCompensation, instance_id_.value(), generation_.value(),
                      owed.step_key, owed.handler, std::string(to_string(state)), attempts,
                      pg::nullable(error_text), pg::nullable(due_text), std::string(what),
                      detail.dump());
    }
    if (rows.empty()) refused("compensating step " + owed.step_key);
    after_journal_write();
    return rows[0][0].as<bool>();
  }

  [[noreturn]] void refused(const std::string& what) const {
    throw FencedError(what + " refused: instance " + instance_id_.value() +
                          " is no longer held at generation " + std::to_string(generation_.value()),
                      {{"instance_id", instance_id_.value()}, {"generation", generation_.value()}});
  }

 private:
  pg::Pool& pool_;
  const InstanceId& instance_id_;
  Generation generation_;
};

}  // namespace

json RollbackEnd::to_json() const {
  constexpr std::string_view kStates[] = {"complete", "stopped", "failed"};
  json j = {{"state", kStates[static_cast<int>(state)]}, {"compensated", compensated}};
  if (!message.empty()) j["message"] = message;
  if (step) j["step"] = *step;
  if (handler) j["handler"] = *handler;
  return j;
}

RollbackEnd roll_back(pg::Pool& pool, const Registry& registry, const InstanceId& instance_id,
                      Generation generation, const std::atomic<bool>& lost) {
  Journal journal(pool, instance_id, generation);
  RollbackEnd end;
  for (const Owed& owed : journal.owed()) {
    if (owed.state == StepState::succeeded) {
      ++end.compensated;
      continue;
    }
    const Compensation* handler = registry.find_compensation(owed.handler);
    if (!handler) {
      end.state = RollbackState::stopped;
      end.step = owed.step_key;
      end.handler = owed.handler;
      end.message = "rollback stopped at step " + owed.step_key + ": compensation '" +
                    owed.handler + "' is not registered";
      return end;
    }
    if (owed.state == StepState::failed) {  // a final failure recorded before a crash
      end.state = RollbackState::failed;
      end.step = owed.step_key;
      end.handler = owed.handler;
      end.message = "rollback failed at step " + owed.step_key + ": compensation '" + owed.handler +
                    "' failed";
      return end;
    }
    if (owed.due_in_ms && *owed.due_in_ms > 0) throw Suspended{{owed.step_key}};
    const StepConfig& config = handler->retry;
    for (int attempt = owed.attempts + 1;; ++attempt) {
      if (lost) journal.refused("compensating step " + owed.step_key);
      const BodyOutcome outcome = run_body(
          config,
          [&](std::stop_token stop) {
            handler->undo(UndoRequest{instance_id, owed.step_key, owed.output, attempt}, stop);
            return json(true);
          },
          attempt);
      if (lost) journal.refused("compensating step " + owed.step_key);
      const json detail = {{"handler", owed.handler}, {"attempt", attempt}};
      if (outcome.value) {
        journal.record(owed, StepState::succeeded, attempt, json(), std::nullopt, "compensated",
                       detail);
        ++end.compensated;
        break;
      }
      const json error = {{"message", outcome.failure}, {"kind", to_string(outcome.kind)}};
      if (outcome.kind == StepErrorKind::non_retryable || attempt > config.retries) {
        journal.record(owed, StepState::failed, attempt, error, std::nullopt, "compensation failed",
                       {{"handler", owed.handler}, {"attempt", attempt}, {"error", error}});
        end.state = RollbackState::failed;
        end.step = owed.step_key;
        end.handler = owed.handler;
        end.message = "rollback failed at step " + owed.step_key + ": compensation '" +
                      owed.handler + "' failed: " + outcome.failure;
        return end;
      }
      const std::int64_t delay = retry_delay_ms(config, attempt);
      const bool retry_now = journal.record(owed, StepState::pending, attempt, error, delay,
                                            "compensation attempt failed",
                                            {{"handler", owed.handler},
                                             {"attempt", attempt},
                                             {"error", error},
                                             {"retry_in_ms", delay}});
      if (!retry_now) throw Suspended{{owed.step_key}};
    }
  }
  return end;
}

}  // namespace runledger::coordinator
