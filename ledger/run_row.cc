#include "ledger/run_row.h"

#include "timestamps/timestamps.h"

namespace runledger::ledger {
namespace {

std::optional<std::string> optional_text(const pqxx::field& f) {
  if (f.is_null()) return std::nullopt;
  return f.as<std::string>();
}

nlohmann::json owner_json(const Owner& owner) {
  const std::string& slot = owner.slot.value();
  const bool http = slot.starts_with(kHttpSlotPrefix);
  return {{"slot", http ? slot.substr(kHttpSlotPrefix.size()) : slot},
          {"incarnation", owner.incarnation.value()},
          {"via", http ? "http" : "database"}};
}

}  // namespace

Run run_from_row(const pqxx::row& row) {
  std::optional<Owner> owner;
  if (!row["owner_slot"].is_null() && !row["owner_incarnation"].is_null()) {
    owner = Owner{SlotName(row["owner_slot"].as<std::string>()),
                  IncarnationId(row["owner_incarnation"].as<std::string>())};
  }
  std::optional<RunId> parent_run;
  if (!row["parent_run_id"].is_null()) parent_run = RunId(row["parent_run_id"].as<std::string>());
  return Run{
      .run_id = RunId(row["run_id"].as<std::string>()),
      .dispatch_key = row["dispatch_key"].as<std::string>(),
      .thread_key = row["thread_key"].as<std::string>(),
      .parent_run = std::move(parent_run),
      .parent_instance = optional_text(row["parent_instance_id"]),
      .depth = row["depth"].as<int>(),
      .requester = row["requester"].as<std::string>(),
      .profile = nlohmann::json::parse(row["profile"].as<std::string>()),
      .status = parse_run_status(row["status"].as<std::string>()),
      .generation = Generation(row["generation"].as<std::int64_t>()),
      .owner = std::move(owner),
      .lease_expires_at = optional_text(row["lease_expires_at"]),
      .takeovers = row["takeovers"].as<int>(),
      .budget = Budget{row["budget_wall_s"].as<int>(), row["budget_max_steps"].as<int>()},
      .created_at = row["created_at"].as<std::string>(),
      .claimed_at = optional_text(row["claimed_at"]),
      .finished_at = optional_text(row["finished_at"]),
      .result = row["result"].is_null() ? nlohmann::json()
                                        : nlohmann::json::parse(row["result"].as<std::string>()),
      .input = row["input"].is_null() ? nlohmann::json()
                                      : nlohmann::json::parse(row["input"].as<std::string>()),
  };
}

nlohmann::json to_json(const Run& run) {
  const auto optional = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  return {
      {"run_id", run.run_id.value()},
      {"dispatch_key", run.dispatch_key},
      {"thread_key", run.thread_key},
      {"parent_run_id",
       run.parent_run ? nlohmann::json(run.parent_run->value()) : nlohmann::json()},
      {"parent_instance_id", optional(run.parent_instance)},
      {"depth", run.depth},
      {"requester", run.requester},
      {"profile", run.profile},
      {"status", to_string(run.status)},
      {"generation", run.generation.value()},
      {"owner", run.owner ? owner_json(*run.owner) : nlohmann::json()},
      {"lease_expires_at", optional(timestamps::optional_rfc3339(run.lease_expires_at))},
      {"takeovers", run.takeovers},
      {"budget", {{"wall_s", run.budget.wall_s}, {"max_steps", run.budget.max_steps}}},
      {"created_at", timestamps::rfc3339(run.created_at)},
      {"claimed_at", optional(timestamps::optional_rfc3339(run.claimed_at))},
      {"finished_at", optional(timestamps::optional_rfc3339(run.finished_at))},
      {"result", run.result},
      {"input", run.input},
  };
}

}  // namespace runledger::ledger
