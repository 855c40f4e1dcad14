// Rows of the coordinator's tables read into structs, and the names of its enums as the tables
// hold them.
#include "coordinator/rows.h"

#include "errors/errors.h"
#include "timestamps/timestamps.h"

namespace runledger::coordinator {
namespace {

// Each enum's names, in its declaration order (the text the tables hold).
constexpr std::string_view kStatusNames[] = {"queued",   "running", "waiting",   "paused",
                                             "complete", "errored", "terminated"};
constexpr std::string_view kStepKindNames[] = {"run", "sleep", "wait", "wait_any", "spawn"};
constexpr std::string_view kStepStateNames[] = {"pending", "succeeded", "failed"};
constexpr std::string_view kStepErrorKindNames[] = {
    "failed",        "non_retryable", "timeout", "value_too_large",
    "event_timeout", "step_limit",    "deadline"};

template <class Enum, std::size_t N>
Enum parse_name(const std::string_view (&names)[N], std::string_view name, std::string_view what) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<Enum>(i);
  }
  std::string known;
  for (const auto n : names) known += (known.empty() ? "" : ", ") + std::string(n);
  throw InvalidArgument("unknown " + std::string(what) + " '" + std::string(name.substr(0, 32)) +
                        "' (" + known + ")");
}

}  // namespace

std::string_view to_string(InstanceStatus status) {
  return kStatusNames[static_cast<int>(status)];
}

InstanceStatus parse_instance_status(std::string_view name) {
  return parse_name<InstanceStatus>(kStatusNames, name, "instance status");
}

std::string_view to_string(StepKind kind) {
  return kStepKindNames[static_cast<int>(kind)];
}

StepKind parse_step_kind(std::string_view name) {
  return parse_name<StepKind>(kStepKindNames, name, "step kind");
}

std::string_view to_string(StepState state) {
  return kStepStateNames[static_cast<int>(state)];
}

StepState parse_step_state(std::string_view name) {
  return parse_name<StepState>(kStepStateNames, name, "step state");
}

std::string_view to_string(StepErrorKind kind) {
  return kStepErrorKindNames[static_cast<int>(kind)];
}

StepErrorKind parse_step_error_kind(std::string_view name) {
  return parse_name<StepErrorKind>(kStepErrorKindNames, name, "step error kind");
}

std::optional<std::string> optional_text(const pqxx::field& f) {
  if (f.is_null()) return std::nullopt;
  return f.as<std::string>();
}

json json_from(const pqxx::field& field) {
  return field.is_null() ? json() : json::parse(field.c_str());
}

std::optional<std::string> json_text(const json& value) {
  return value.is_null() ? std::nullopt : std::optional<std::string>(value.dump());
}

std::optional<std::string> int_text(std::optional<std::int64_t> value) {
  return value ? std::optional<std::string>(std::to_string(*value)) : std::nullopt;
}

Instance instance_from_row(const pqxx::row& row) {
  return Instance{
      .instance_id = InstanceId(row[0].as<std::string>()),
      .workflow = row[1].as<std::string>(),
      .version = row[2].as<int>(),
      .input = json_from(row[3]),
      .status = parse_instance_status(row[4].c_str()),
      .output = json_from(row[5]),
      .error = json_from(row[6]),
      .generation = Generation(row[7].as<std::int64_t>()),
      .owner = optional_text(row[8]),
      .wake_at = optional_text(row[9]),
      .deadline_at = row[10].as<std::string>(),
      .current_step = optional_text(row[11]),
      .created_at = row[12].as<std::string>(),
      .updated_at = row[13].as<std::string>(),
      .finished_at = optional_text(row[14]),
      .rollback = json_from(row[15]),
  };
}

StepRecord step_from_row(const pqxx::row& row) {
  return StepRecord{
      .step_key = row[0].as<std::string>(),
      .kind = parse_step_kind(row[1].c_str()),
      .state = parse_step_state(row[2].c_str()),
      .attempts = row[3].as<int>(),
      .config = json_from(row[4]),
      .output = json_from(row[5]),
      .error = json_from(row[6]),
      .due_at = optional_text(row[7]),
      .generation = Generation(row[8].as<std::int64_t>()),
  };
}

json to_json(const Instance& i) {
  const auto optional = [](const auto& v) { return v ? json(*v) : json(); };
  using timestamps::optional_rfc3339;
  using timestamps::rfc3339;
  return {{"instance_id", i.instance_id.value()},
          {"workflow", i.workflow},
          {"version", i.version},
          {"input", i.input},
          {"status", to_string(i.status)},
          {"output", i.output},
          {"error", i.error},
          {"generation", i.generation.value()},
          {"owner", optional(i.owner)},
          {"wake_at", optional(optional_rfc3339(i.wake_at))},
          {"deadline_at", rfc3339(i.deadline_at)},
          {"current_step", optional(i.current_step)},
          {"created_at", rfc3339(i.created_at)},
          {"updated_at", rfc3339(i.updated_at)},
          {"finished_at", optional(optional_rfc3339(i.finished_at))},
          {"rollback", i.rollback}};
}

}  // namespace runledger::coordinator
