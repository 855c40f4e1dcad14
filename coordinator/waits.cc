// Sleeps and waits of a replay: recorded with their due time, taken when due, timed out.
#include "coordinator/replay.h"
#include "coordinator/rows.h"
#include "coordinator/statements.h"
#include "errors/errors.h"

namespace runledger::coordinator {

// A recorded sleep: done, due (recorded as done now), or still to wait for.
void Replay::replay_sleep(const std::string& key, const RecordedStep& rec) {
  if (rec.state == StepState::succeeded) return;
  if (due(rec)) {
    record_step(key, StepKind::sleep, rec.config, StepState::succeeded, 0, json(), json(),
                std::nullopt, "woke", json::object());
    return;
  }
  check_deadline(key);
  throw Suspended{{key}};
}

void Replay::sleep(const std::string& key, std::optional<std::int64_t> until_unix_ms,
                   std::optional<std::int64_t> duration_ms) {
  if (const RecordedStep* rec = record(key, StepKind::sleep)) return replay_sleep(key, *rec);
  check_deadline(key);
  bool is_due = false;
  {
    const auto until = int_text(until_unix_ms), duration = int_text(duration_ms);
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows =
        pg::exec(tx, sql::kRecordSleep, claimed_.instance_id.value(), claimed_.generation.value(),
                 key, pg::nullable(until), pg::nullable(duration));
    if (rows[0][0].as<int>() == 0 || rows[0][1].is_null()) refused("sleep " + key);
    is_due = rows[0][1].as<bool>();
  }
  after_journal_write();
  RecordedStep pending;
  pending.kind = StepKind::sleep;
  pending.due_in_ms = is_due ? 0 : INT64_MAX;
  remember(key, std::move(pending));
  if (!is_due) throw Suspended{{key}};
}

json Replay::wait(const std::string& key, StepKind kind, const json& alternatives,
                  std::int64_t timeout_ms) {
  if (timeout_ms <= 0) {
    throw InvalidArgument("wait " + key + " needs a positive timeout: nothing waits unbounded");
  }
  for (const auto& a : alternatives) {
    if (!a["match"].is_object()) throw InvalidArgument("wait " + key + ": match is a JSON object");
  }
  json config = kind == StepKind::wait ? json{{"type", alternatives[0]["type"]},
                                              {"match", alternatives[0]["match"]},
                                              {"timeout_ms", timeout_ms}}
                                       : json{{"any", alternatives}, {"timeout_ms", timeout_ms}};
  const RecordedStep* rec = record(key, kind);
  if (rec) {
    if (rec->state == StepState::succeeded) return rec->output;
    if (rec->state == StepState::failed) {
      throw EventTimeout(key, rec->error.value("message", "wait " + key + " timed out"));
    }
    config = rec->config;  // the stored wait wins
  }
  const json stored = config.contains("any")
                          ? config["any"]
                          : json::array({{{"type", config["type"]}, {"match", config["match"]}}});
  check_deadline(key);
  json output;
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows =
        pg::exec(tx, sql::kWait, claimed_.instance_id.value(), claimed_.generation.value(), key,
                 std::string(to_string(kind)), stored.dump(), config.dump(),
                 config["timeout_ms"].get<std::int64_t>());
    if (rows[0][0].as<int>() == 0) refused("wait " + key);
    if (!rows[0][1].is_null()) output = json::parse(rows[0][1].c_str());
  }
  after_journal_write();
  if (!output.is_null()) {
    RecordedStep taken;
    taken.kind = kind;
    taken.state = StepState::succeeded;
    taken.output = output;
    remember(key, std::move(taken));
    return output;
  }
  if (rec && due(*rec)) {
    std::string waited_for;
    for (const auto& a : stored) {
      waited_for += (waited_for.empty() ? "" : " or ") +
                    ("'" + a["type"].get<std::string>() + "' matching " + a["match"].dump());
    }
    const std::string message = "wait " + key + " for event " + waited_for + " timed out after " +
                                std::to_string(config["timeout_ms"].get<std::int64_t>()) + " ms";
    record_step(key, kind, config, StepState::failed, 0, json(),
                {{"message", message}, {"kind", to_string(StepErrorKind::event_timeout)}},
                std::nullopt, "timed out", {{"message", message}});
    throw EventTimeout(key, message);
  }
  throw Suspended{{key}};
}

}  // namespace runledger::coordinator
