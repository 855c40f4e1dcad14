// The client side: the registry, instance creation, events, and reads.
#include <algorithm>

#include "coordinator/coordinator.h"
#include "coordinator/rows.h"
#include "coordinator/statements.h"
#include "errors/errors.h"

namespace runledger::coordinator {
namespace {

constexpr std::string_view kStatusNames[] = {"queued",   "running", "waiting",   "paused",
                                             "complete", "errored", "terminated"};

std::optional<std::string> optional_text(const pqxx::field& f) {
  if (f.is_null()) return std::nullopt;
  return f.as<std::string>();
}

}  // namespace

std::string_view to_string(InstanceStatus status) {
  return kStatusNames[static_cast<int>(status)];
}

InstanceStatus parse_instance_status(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kStatusNames); ++i) {
    if (kStatusNames[i] == name) return static_cast<InstanceStatus>(i);
  }
  throw InvalidArgument("unknown instance status '" + std::string(name.substr(0, 32)) +
                        "' (queued, running, waiting, paused, complete, errored, terminated)");
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
      .instance_id = row[0].as<std::string>(),
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
      .kind = row[1].as<std::string>(),
      .state = row[2].as<std::string>(),
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
  return {{"instance_id", i.instance_id},
          {"workflow", i.workflow},
          {"version", i.version},
          {"input", i.input},
          {"status", to_string(i.status)},
          {"output", i.output},
          {"error", i.error},
          {"generation", i.generation.value()},
          {"owner", optional(i.owner)},
          {"wake_at", optional(i.wake_at)},
          {"deadline_at", i.deadline_at},
          {"current_step", optional(i.current_step)},
          {"created_at", i.created_at},
          {"updated_at", i.updated_at},
          {"finished_at", optional(i.finished_at)},
          {"rollback", i.rollback}};
}

void Registry::add(Registration registration) {
  if (registration.name.empty()) throw InvalidArgument("a workflow registration needs a name");
  if (registration.max_duration.count() <= 0) {
    throw InvalidArgument("workflow " + registration.name + ": max_duration must be positive");
  }
  const std::string name = registration.name;
  if (!workflows_.emplace(name, std::move(registration)).second) {
    throw InvalidArgument("workflow " + name + " is registered twice");
  }
}

void Registry::add_compensation(Compensation compensation) {
  if (compensation.name.empty()) throw InvalidArgument("a compensation needs a name");
  if (!compensation.undo) {
    throw InvalidArgument("compensation " + compensation.name + " has no undo function");
  }
  const std::string name = compensation.name;
  if (!compensations_.emplace(name, std::move(compensation)).second) {
    throw InvalidArgument("compensation " + name + " is registered twice");
  }
}

const Compensation* Registry::find_compensation(std::string_view name) const {
  const auto it = compensations_.find(name);
  return it == compensations_.end() ? nullptr : &it->second;
}

const Registration* Registry::find(std::string_view name) const {
  const auto it = workflows_.find(name);
  return it == workflows_.end() ? nullptr : &it->second;
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, r] : workflows_) out.push_back(name);
  return out;
}

std::vector<std::string> Registry::runnable_names() const {
  std::vector<std::string> out;
  for (const auto& [name, r] : workflows_) {
    if (r.workflow) out.push_back(name);
  }
  return out;
}

Coordinator::Coordinator(pg::Pool& pool, const Registry& registry)
    : pool_(pool), registry_(registry) {}

namespace {

const Registration& registered(const Registry& registry, std::string_view workflow) {
  const Registration* r = registry.find(workflow);
  if (!r) {
    throw InvalidArgument(
        "no workflow named '" + std::string(workflow.substr(0, 64)) + "' is registered",
        {{"field", "workflow"}});
  }
  return *r;
}

}  // namespace

int Coordinator::create_batch(std::string_view workflow,
                              const std::vector<std::pair<std::string, json>>& instances) {
  if (instances.size() > kMaxBatch) {
    throw InvalidArgument("a batch creates at most " + std::to_string(kMaxBatch) +
                          " instances, not " + std::to_string(instances.size()));
  }
  const Registration& r = registered(registry_, workflow);
  json batch = json::array();
  for (const auto& [instance_id, input] : instances) {
    check_instance_id(instance_id, "instance_id");
    batch.push_back({{"id", instance_id}, {"input", input}});
  }
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kCreateBatch, batch.dump(), r.name, r.version,
                             static_cast<std::int64_t>(r.max_duration.count()));
  return rows[0][0].as<int>();
}

Created Coordinator::create(std::string_view workflow, const std::string& instance_id,
                            const json& input) {
  check_instance_id(instance_id, "instance_id");
  const Registration* r = &registered(registry_, workflow);
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  auto rows = pg::exec(tx, sql::kCreate, instance_id, r->name, r->version, input.dump(),
                       static_cast<std::int64_t>(r->max_duration.count()));
  if (!rows.empty()) return {instance_from_row(rows[0]), true};
  rows = pg::exec(tx, sql::kGet, instance_id);
  if (rows.empty()) throw Conflict("instance " + instance_id + " vanished while being created");
  return {instance_from_row(rows[0]), false};
}

bool Coordinator::send_event(const std::string& instance_id, const std::string& type,
                             const json& payload, const std::string& dedupe_key,
                             const std::string& by) {
  check_key(type, "type");
  check_key(dedupe_key, "dedupe_key");
  check_key(by, "by");
  if (!payload.is_object()) {
    throw InvalidArgument("an event payload is a JSON object", {{"field", "payload"}});
  }
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  if (!pg::exec(tx, sql::kSendEvent, instance_id, type, payload.dump(), dedupe_key, by).empty()) {
    return true;
  }
  if (pg::exec(tx, sql::kExists, instance_id).empty()) {
    throw NotFound("instance " + instance_id + " does not exist", {{"instance_id", instance_id}});
  }
  return false;
}

Instance Coordinator::get(const std::string& instance_id) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kGet, instance_id);
  if (rows.empty()) {
    throw NotFound("instance " + instance_id + " does not exist", {{"instance_id", instance_id}});
  }
  return instance_from_row(rows[0]);
}

std::vector<Instance> Coordinator::list(std::optional<InstanceStatus> status, int limit) {
  if (limit < 1) throw InvalidArgument("limit must be positive", {{"field", "limit"}});
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const std::optional<std::string> status_name =
      status ? std::optional<std::string>(std::string(to_string(*status))) : std::nullopt;
  std::vector<Instance> out;
  for (const auto& row : pg::exec(tx, sql::kList, pg::nullable(status_name), limit)) {
    out.push_back(instance_from_row(row));
  }
  return out;
}

std::vector<StepRecord> Coordinator::steps(const std::string& instance_id) {
  get(instance_id);  // NotFound
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  std::vector<StepRecord> out;
  for (const auto& row : pg::exec(tx, sql::kSteps, instance_id)) out.push_back(step_from_row(row));
  return out;
}

std::vector<HistoryEntry> Coordinator::history(const std::string& instance_id) {
  get(instance_id);  // NotFound
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  std::vector<HistoryEntry> out;
  for (const auto& row : pg::exec(tx, sql::kHistory, instance_id)) {
    out.push_back(
        {row[0].as<std::int64_t>(), row[1].as<std::string>(),
         row[2].is_null() ? std::nullopt : std::optional<std::int64_t>(row[2].as<std::int64_t>()),
         row[3].as<std::string>(), optional_text(row[4]), json_from(row[5])});
  }
  return out;
}

namespace {

void require_action(pg::Pool& pool, const pg::Statement& statement, const std::string& instance_id,
                    const std::string& by, std::string_view action) {
  check_key(by, "by");
  auto conn = pool.acquire();
  pqxx::nontransaction tx(*conn);
  if (!pg::exec(tx, statement, instance_id, by).empty()) return;
  const auto rows = pg::exec(tx, sql::kGet, instance_id);
  if (rows.empty()) {
    throw NotFound("instance " + instance_id + " does not exist", {{"instance_id", instance_id}});
  }
  const auto instance = instance_from_row(rows[0]);
  throw Conflict("cannot " + std::string(action) + " instance " + instance_id + ": it is " +
                     std::string(to_string(instance.status)),
                 {{"instance_id", instance_id}, {"status", to_string(instance.status)}});
}

}  // namespace

void Coordinator::pause(const std::string& instance_id, const std::string& by) {
  require_action(pool_, sql::kPause, instance_id, by, "pause");
}

void Coordinator::resume(const std::string& instance_id, const std::string& by) {
  require_action(pool_, sql::kResume, instance_id, by, "resume");
}

void Coordinator::terminate(const std::string& instance_id, const std::string& by, bool rollback) {
  require_action(pool_, rollback ? sql::kTerminateWithRollback : sql::kTerminate, instance_id, by,
                 "terminate");
}

int Coordinator::restart(const std::string& instance_id, const std::string& step_key,
                         const std::string& by) {
  check_key(by, "by");
  pqxx::result rows;
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    rows = pg::exec(tx, sql::kRestart, instance_id, by, step_key);
  }
  if (rows.empty()) {
    get(instance_id);  // NotFound for the instance itself
    const auto recorded = steps(instance_id);
    if (std::ranges::find(recorded, step_key, &StepRecord::step_key) != recorded.end()) {
      throw Conflict("cannot restart instance " + instance_id + " from step " + step_key +
                         ": a step before it was compensated (its effect is undone); restart "
                         "from that step or earlier",
                     {{"instance_id", instance_id}, {"step_key", step_key}});
    }
    throw NotFound("instance " + instance_id + " has no step " + step_key,
                   {{"instance_id", instance_id}, {"step_key", step_key}});
  }
  return rows[0][0].as<int>();
}

}  // namespace runledger::coordinator
