// The client side (Coordinator): instance creation, events, reads and operator actions.
#include <algorithm>

#include "coordinator/coordinator.h"
#include "coordinator/rows.h"
#include "coordinator/statements.h"
#include "errors/errors.h"

namespace runledger::coordinator {

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
                              const std::vector<std::pair<InstanceId, json>>& instances) {
  if (instances.size() > kMaxBatch) {
    throw InvalidArgument("a batch creates at most " + std::to_string(kMaxBatch) +
                          " instances, not " + std::to_string(instances.size()));
  }
  const Registration& r = registered(registry_, workflow);
  json batch = json::array();
  for (const auto& [instance_id, input] : instances) {
    // Where the id enters the database: checked even though an InstanceId should be parsed.
    check_instance_id(instance_id.value(), "instance_id");
    batch.push_back({{"id", instance_id.value()}, {"input", input}});
  }
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kCreateBatch, batch.dump(), r.name, r.version,
                             static_cast<std::int64_t>(r.max_duration.count()));
  return rows[0][0].as<int>();
}

Created Coordinator::create(std::string_view workflow, const InstanceId& instance_id,
                            const json& input) {
  check_instance_id(instance_id.value(), "instance_id");
  const Registration* r = &registered(registry_, workflow);
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  auto rows = pg::exec(tx, sql::kCreate, instance_id.value(), r->name, r->version, input.dump(),
                       static_cast<std::int64_t>(r->max_duration.count()));
  if (!rows.empty()) return {instance_from_row(rows[0]), true};
  rows = pg::exec(tx, sql::kGet, instance_id.value());
  if (rows.empty())
    throw Conflict("instance " + instance_id.value() + " vanished while being created");
  return {instance_from_row(rows[0]), false};
}

bool Coordinator::send_event(const InstanceId& instance_id, const std::string& type,
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
  if (!pg::exec(tx, sql::kSendEvent, instance_id.value(), type, payload.dump(), dedupe_key, by)
           .empty()) {
    return true;
  }
  if (pg::exec(tx, sql::kExists, instance_id.value()).empty()) {
    throw NotFound("instance " + instance_id.value() + " does not exist",
                   {{"instance_id", instance_id.value()}});
  }
  return false;
}

Instance Coordinator::get(const InstanceId& instance_id) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kGet, instance_id.value());
  if (rows.empty()) {
    throw NotFound("instance " + instance_id.value() + " does not exist",
                   {{"instance_id", instance_id.value()}});
  }
  return instance_from_row(rows[0]);
}

namespace {

bool is_instance_id(std::string_view id) {
  try {
    check_instance_id(id, "cursor");
    return true;
  } catch (const InvalidArgument&) {
    return false;
  }
}

// Each listing's cursors are its own (paging/paging.h).
constexpr paging::Listing kAllInstances{"instances", true, is_instance_id};
constexpr paging::Listing kInstancesWithStatus{"instances_with_status", true, is_instance_id};
constexpr paging::Listing kInstancesOfWorkflow{"instances_of_workflow", true, is_instance_id};
constexpr paging::Listing kHistory{"instance_history", false, paging::is_integer_id};

// The page of a listing statement's rows; `key` (if any) is its first parameter.
paging::Page<Instance> instances_page(pg::Pool& pool, const pg::Statement& statement,
                                      const paging::Listing& listing,
                                      const std::optional<std::string>& key,
                                      const paging::PageRequest& page) {
  const auto start = paging::start_parameters(listing, page);
  auto conn = pool.acquire();
  pqxx::nontransaction tx(*conn);
  const pqxx::result rows = key ? pg::exec(tx, statement, *key, pg::nullable(start.at_us),
                                           pg::nullable(start.id), page.limit + 1)
                                : pg::exec(tx, statement, pg::nullable(start.at_us),
                                           pg::nullable(start.id), page.limit + 1);
  return paging::page_of<Instance>(
      rows, listing, page.limit, [](const pqxx::row& row) { return instance_from_row(row); },
      [](const pqxx::row& row) {
        return paging::Position{row["position_at"].as<std::int64_t>(),
                                row["instance_id"].as<std::string>()};
      });
}

}  // namespace

paging::Page<Instance> Coordinator::instances(const paging::PageRequest& page) {
  return instances_page(pool_, sql::kInstances, kAllInstances, std::nullopt, page);
}

paging::Page<Instance> Coordinator::instances_with_status(InstanceStatus status,
                                                          const paging::PageRequest& page) {
  const bool active = status == InstanceStatus::queued || status == InstanceStatus::running ||
                      status == InstanceStatus::waiting;
  return instances_page(pool_, active ? sql::kInstancesActive : sql::kInstancesAtRest,
                        kInstancesWithStatus, std::string(to_string(status)), page);
}

paging::Page<Instance> Coordinator::instances_of_workflow(std::string_view workflow,
                                                          const paging::PageRequest& page) {
  check_key(workflow, "workflow");
  return instances_page(pool_, sql::kInstancesOfWorkflow, kInstancesOfWorkflow,
                        std::string(workflow), page);
}

std::vector<StepRecord> Coordinator::steps(const InstanceId& instance_id) {
  get(instance_id);  // NotFound
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  std::vector<StepRecord> out;
  for (const auto& row : pg::exec(tx, sql::kSteps, instance_id.value()))
    out.push_back(step_from_row(row));
  return out;
}

paging::Page<HistoryEntry> Coordinator::history(const InstanceId& instance_id,
                                                const paging::PageRequest& page) {
  const auto start = paging::start_parameters(kHistory, page);
  get(instance_id);  // NotFound
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows =
      pg::exec(tx, sql::kHistory, instance_id.value(), pg::nullable(start.id), page.limit + 1);
  return paging::page_of<HistoryEntry>(
      rows, kHistory, page.limit,
      [](const pqxx::row& row) {
        return HistoryEntry{row[0].as<std::int64_t>(),
                            row[1].as<std::string>(),
                            row[2].is_null()
                                ? std::nullopt
                                : std::optional<std::int64_t>(row[2].as<std::int64_t>()),
                            row[3].as<std::string>(),
                            optional_text(row[4]),
                            json_from(row[5])};
      },
      [](const pqxx::row& row) {
        return paging::Position{std::nullopt, row[0].as<std::string>()};
      });
}

std::vector<HistoryEntry> Coordinator::history(const InstanceId& instance_id) {
  return paging::all_pages(
      [&](const paging::PageRequest& page) { return history(instance_id, page); });
}

int Coordinator::expire_waits(const InstanceId& instance_id, const std::string& step,
                              const std::string& by) {
  check_key(step, "step");
  check_key(by, "by");
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const int expired =
      pg::exec(tx, sql::kExpireWaits, instance_id.value(), step, by)[0][0].as<int>();
  if (expired == 0 && pg::exec(tx, sql::kExists, instance_id.value()).empty()) {
    throw NotFound("instance " + instance_id.value() + " does not exist",
                   {{"instance_id", instance_id.value()}});
  }
  return expired;
}

namespace {

void require_action(pg::Pool& pool, const pg::Statement& statement, const InstanceId& instance_id,
                    const std::string& by, std::string_view action) {
  check_key(by, "by");
  auto conn = pool.acquire();
  pqxx::nontransaction tx(*conn);
  if (!pg::exec(tx, statement, instance_id.value(), by).empty()) return;
  const auto rows = pg::exec(tx, sql::kGet, instance_id.value());
  if (rows.empty()) {
    throw NotFound("instance " + instance_id.value() + " does not exist",
                   {{"instance_id", instance_id.value()}});
  }
  const auto instance = instance_from_row(rows[0]);
  throw Conflict("cannot " + std::string(action) + " instance " + instance_id.value() + ": it is " +
                     std::string(to_string(instance.status)),
                 {{"instance_id", instance_id.value()}, {"status", to_string(instance.status)}});
}

}  // namespace

void Coordinator::pause(const InstanceId& instance_id, const std::string& by) {
  require_action(pool_, sql::kPause, instance_id, by, "pause");
}

void Coordinator::resume(const InstanceId& instance_id, const std::string& by) {
  require_action(pool_, sql::kResume, instance_id, by, "resume");
}

void Coordinator::terminate(const InstanceId& instance_id, const std::string& by, bool rollback) {
  require_action(pool_, rollback ? sql::kTerminateWithRollback : sql::kTerminate, instance_id, by,
                 "terminate");
}

int Coordinator::restart(const InstanceId& instance_id, const std::string& step_key,
                         const std::string& by) {
  check_key(by, "by");
  pqxx::result rows;
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    rows = pg::exec(tx, sql::kRestart, instance_id.value(), by, step_key);
  }
  if (rows.empty()) {
    get(instance_id);  // NotFound for the instance itself
    const auto recorded = steps(instance_id);
    if (std::ranges::find(recorded, step_key, &StepRecord::step_key) != recorded.end()) {
      throw Conflict("cannot restart instance " + instance_id.value() + " from step " + step_key +
                         ": a step before it was compensated (its effect is undone); restart "
                         "from that step or earlier",
                     {{"instance_id", instance_id.value()}, {"step_key", step_key}});
    }
    throw NotFound("instance " + instance_id.value() + " has no step " + step_key,
                   {{"instance_id", instance_id.value()}, {"step_key", step_key}});
  }
  return rows[0][0].as<int>();
}

}  // namespace runledger::coordinator
