#include "ledger/ledger.h"

#include "errors/errors.h"
#include "ledger/run_row.h"
#include "ledger/statements.h"

namespace runledger::ledger {
namespace {

constexpr std::string_view kStatusNames[] = {"queued", "running",     "finished",
                                             "failed", "interrupted", "cancelled"};

void check_budget(const Budget& b, const Budget& max) {
  if (b.wall_s < 1 || b.wall_s > max.wall_s) {
    throw InvalidArgument("budget.wall_s must be between 1 and " + std::to_string(max.wall_s),
                          {{"field", "budget.wall_s"}});
  }
  if (b.max_steps < 1 || b.max_steps > max.max_steps) {
    throw InvalidArgument("budget.max_steps must be between 1 and " + std::to_string(max.max_steps),
                          {{"field", "budget.max_steps"}});
  }
}

struct Insert {
  const DispatchRequest& request;
  const std::string& profile;
  const std::optional<std::string>& input;
  Budget budget;
};

// INSERT .. ON CONFLICT (dispatch_key) DO NOTHING; an empty RETURNING means the key exists
// (possibly inserted by a concurrent dispatch a moment ago), so the existing run is returned.
Dispatched insert_run(pqxx::transaction_base& tx, const Insert& in, int depth) {
  std::optional<std::string> parent_run;
  if (in.request.parent_run) parent_run = in.request.parent_run->value();
  const auto inserted =
      pg::exec(tx, sql::kInsertRun, in.request.dispatch_key, in.request.thread_key,
               in.request.requester, in.profile, in.budget.wall_s, in.budget.max_steps,
               pg::nullable(parent_run), pg::nullable(in.request.parent_instance), depth,
               pqxx::binarystring(in.request.system_prompt), pg::nullable(in.input));
  if (!inserted.empty()) return {run_from_row(inserted[0]), true};
  return {run_from_row(pg::exec(tx, sql::kRunByDispatchKey, in.request.dispatch_key)[0]), false};
}

}  // namespace

std::string_view to_string(RunStatus status) {
  return kStatusNames[static_cast<int>(status)];
}

RunStatus parse_run_status(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kStatusNames); ++i) {
    if (kStatusNames[i] == name) return static_cast<RunStatus>(i);
  }
  throw InvalidArgument("unknown run status '" + std::string(name.substr(0, 32)) +
                        "' (expected queued, running, finished, failed, interrupted or cancelled)");
}

bool is_terminal(RunStatus status) {
  return status != RunStatus::queued && status != RunStatus::running;
}

Ledger::Ledger(pg::Pool& pool, Options options) : pool_(pool), options_(options) {
  if (options_.lease_ttl < std::chrono::milliseconds(1)) {
    throw InvalidArgument("lease_ttl must be positive");
  }
}

Dispatched Ledger::dispatch(const DispatchRequest& request) {
  check_key(request.dispatch_key, "dispatch_key");
  check_key(request.thread_key, "thread_key");
  check_key(request.requester, "requester");
  if (request.parent_instance) check_instance_id(*request.parent_instance, "parent_instance");
  if (!request.profile.is_object()) {
    throw InvalidArgument("profile must be a JSON object", {{"field", "profile"}});
  }
  const std::string profile = request.profile.dump();
  if (profile.size() > options_.max_profile_bytes) {
    throw InvalidArgument(
        "profile is larger than " + std::to_string(options_.max_profile_bytes) + " bytes",
        {{"field", "profile"}});
  }
  if (request.system_prompt.size() > options_.max_system_prompt_bytes) {
    throw InvalidArgument("system_prompt is larger than " +
                              std::to_string(options_.max_system_prompt_bytes) + " bytes",
                          {{"field", "system_prompt"}});
  }
  std::optional<std::string> input;
  if (!request.input.is_null()) {
    input = request.input.dump();
    if (input->size() > options_.max_input_bytes) {
      throw InvalidArgument(
          "input is larger than " + std::to_string(options_.max_input_bytes) + " bytes",
          {{"field", "input"}});
    }
  }
  const Budget budget = request.budget.value_or(options_.default_budget);
  check_budget(budget, options_.max_budget);

  const Insert insert{request, profile, input, budget};
  auto conn = pool_.acquire();
  try {
    if (!request.parent_run && !request.parent_instance) {
      // The common case in one round trip.
      pqxx::nontransaction tx(*conn);
      return insert_run(tx, insert, 0);
    }
    pg::Work tx(*conn);
    // A retried dispatch finds its run before any parent check: it must succeed even when the
    // parent has reached its fan-out cap since.
    if (auto existing = pg::exec(tx, sql::kRunByDispatchKey, request.dispatch_key);
        !existing.empty()) {
      return {run_from_row(existing[0]), false};
    }
    const int depth = lock_parent_and_check_fan_out(tx, request);
    Dispatched out = insert_run(tx, insert, depth);
    tx.commit();
    return out;
  } catch (const pqxx::unique_violation&) {
    // The thread's one-live-run index. A concurrent dispatch of the same key can land here too
    // (its row reached the thread index first), so the key is looked up before refusing.
    pqxx::nontransaction tx(*conn);
    if (auto existing = pg::exec(tx, sql::kRunByDispatchKey, request.dispatch_key);
        !existing.empty()) {
      return {run_from_row(existing[0]), false};
    }
    const auto live = pg::exec(tx, sql::kLiveRunInThread, request.thread_key);
    const std::string live_run = live.empty() ? "" : live[0][0].as<std::string>();
    throw ThreadBusy("thread already has a live run " + live_run,
                     {{"thread_key", request.thread_key}, {"live_run_id", live_run}});
  }
}

int Ledger::lock_parent_and_check_fan_out(pqxx::work& tx, const DispatchRequest& request) const {
  int depth = 0;
  if (request.parent_run) {
    const std::string& parent_run = request.parent_run->value();
    const auto parent = pg::exec(tx, sql::kLockParentRun, parent_run);
    if (parent.empty()) {
      throw NotFound("parent run " + parent_run + " does not exist", {{"run_id", parent_run}});
    }
    if (is_terminal(parse_run_status(parent[0][1].as<std::string>()))) {
      throw Conflict("parent run " + parent_run + " has ended", {{"run_id", parent_run}});
    }
    depth = parent[0][0].as<int>() + 1;
    if (pg::exec(tx, sql::kLiveChildrenOfRun, parent_run)[0][0].as<int>() >=
        options_.max_live_children) {
      throw Conflict("parent run " + parent_run + " already has " +
                         std::to_string(options_.max_live_children) + " live children",
                     {{"run_id", parent_run}, {"max_live_children", options_.max_live_children}});
    }
  }
  if (request.parent_instance) {
    const std::string& instance = *request.parent_instance;
    depth = std::max(depth, 1);
    pg::exec(tx, sql::kLockParentInstance, instance);
    if (pg::exec(tx, sql::kLiveChildrenOfInstance, instance)[0][0].as<int>() >=
        options_.max_live_children) {
      throw Conflict(
          "instance " + instance + " already has " + std::to_string(options_.max_live_children) +
              " live children",
          {{"instance_id", instance}, {"max_live_children", options_.max_live_children}});
    }
  }
  if (depth > options_.max_depth) {
    throw Conflict("a run at depth " + std::to_string(depth - 1) + " may not dispatch children",
                   {{"depth", depth}, {"max_depth", options_.max_depth}});
  }
  return depth;
}

}  // namespace runledger::ledger
