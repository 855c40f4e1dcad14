// The executor's claims and outcomes: claims a due instance, replays it (or rolls it back), and
// records how the replay ended; a transient database failure on the way is no outcome.
#include <spdlog/spdlog.h>

#include "coordinator/executor_state.h"
#include "coordinator/rollback.h"
#include "coordinator/rows.h"
#include "coordinator/statements.h"

namespace runledger::coordinator {

std::optional<ClaimedInstance> Executor::State::claim() {
  auto conn = pool.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows =
      pg::exec(tx, sql::kClaim, id, names, static_cast<std::int64_t>(options.lease_ttl.count()));
  if (rows.empty()) return std::nullopt;
  const auto& row = rows[0];
  ClaimedInstance c;
  c.instance_id = InstanceId(row[0].as<std::string>());
  c.workflow = row[1].as<std::string>();
  c.version = row[2].as<int>();
  c.input = json_from(row[3]);
  c.generation = Generation(row[4].as<std::int64_t>());
  c.event_seq = row[5].as<std::int64_t>();
  c.restarts = row[6].as<int>();
  c.deadline_in_ms = row[7].as<std::int64_t>();
  c.rollback = json_from(row[8]);
  for (const auto& s : json_from(row[9])) c.steps.insert(recorded_step_from_json(s));
  return c;
}

void Executor::State::replay(ClaimedInstance claimed) {
  const std::string instance_id = claimed.instance_id.value();
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
  const std::string instance_id = claimed.instance_id.value();
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
  } catch (const StepError& e) {  // before Error: these are Errors too
    error = {{"message", e.what()}, {"step", e.step_key()}, {"kind", to_string(e.kind())}};
  } catch (const NonDeterminism& e) {
    error = {{"message", e.what()}, {"step", e.step_key()}, {"kind", "non_determinism"}};
  } catch (const Error& e) {
    error = {{"message", e.what()}, {"step", replay.current_step()}, {"kind", "workflow"}};
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
    end = coordinator::roll_back(pool, registry, InstanceId(instance_id), generation, lost);
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
    if (end->state != RollbackState::complete) {
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

}  // namespace runledger::coordinator
