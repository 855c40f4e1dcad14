// The runs: dispatch, read, list, finish, release; and the health checks.
#include <limits>

#include <spdlog/spdlog.h>

#include "digest/digest.h"
#include "errors/errors.h"
#include "server/context.h"
#include "server/routes.h"

namespace runledger::server {
namespace {

// A dispatch body: a 4 MiB system prompt in base64 and its profile.
constexpr std::size_t kDispatchLimit = 6 * kMiB;

nlohmann::json head_json(const transcript::Head& head) {
  return {{"seq", head.seq}, {"sha256", digest::hex(head.sha256)}};
}

struct DispatchCall {
  ledger::DispatchRequest request;
};

DispatchCall read_dispatch(const Call& call) {
  const auto json = json_body(call);
  wire::Object body(json);
  DispatchCall out;
  auto& r = out.request;
  const auto key = body.optional_string("dispatch_key");
  const std::string& header_key = call.request.idempotency_key;
  if (key && !header_key.empty() && *key != header_key) {
    wire::refuse("dispatch_key", "the same key as the Idempotency-Key header, or only one of them");
  }
  r.dispatch_key = key ? *key : header_key;
  if (r.dispatch_key.empty()) wire::refuse("dispatch_key", "a key (or an Idempotency-Key header)");
  check_key(r.dispatch_key, "dispatch_key");
  r.thread_key = key_field(body, "thread_key");
  r.requester = key_field(body, "requester");
  if (auto profile = body.optional_any("profile")) r.profile = std::move(*profile);
  if (auto budget = body.optional_object("budget")) {
    // The ledger checks its configured maximum; this only keeps the values ints.
    constexpr std::int64_t kMostInt = std::numeric_limits<int>::max();
    r.budget = ledger::Budget{static_cast<int>(budget->int64("wall_s", 1, kMostInt)),
                              static_cast<int>(budget->int64("max_steps", 1, kMostInt))};
    budget->finish();
  }
  const auto prompt = body.optional_string("system_prompt");
  const auto prompt_bytes = body.optional_base64("system_prompt_base64");
  if (prompt && prompt_bytes) {
    wire::refuse("system_prompt_base64", "either system_prompt or system_prompt_base64, not both");
  }
  r.system_prompt = prompt ? *prompt : prompt_bytes.value_or("");
  if (auto input = body.optional_any("input")) r.input = std::move(*input);
  if (auto parent = body.optional_uuid("parent_run_id")) r.parent_run = RunId(*parent);
  if (auto parent = body.optional_string("parent_instance_id")) {
    check_instance_id(*parent, "parent_instance_id");
    r.parent_instance = *parent;
  }
  body.finish();
  return out;
}

void check_dispatch(const Call& call) {
  read_dispatch(call);
}

Response serve_dispatch(Context& context, const Call& call) {
  const auto dispatched = context.ledger.dispatch(read_dispatch(call).request);
  auto json = run_json(context, dispatched.run);
  json["created"] = dispatched.created;
  return Response::json(dispatched.created ? 201 : 200, json);
}

constexpr std::int64_t kMaxWaitMs = 30'000;

// How long the caller will wait for the run to end (0: answer at once).
std::int64_t read_get(const Call& call) {
  run_parameter(call, 0);
  only_parameters(call, {"wait_ms"});
  return integer_parameter(call, "wait_ms", 0, kMaxWaitMs).value_or(0);
}

void check_get(const Call& call) {
  read_get(call);
}

bool get_waits(const Call& call) {
  try {
    return read_get(call) > 0;
  } catch (const Error&) {
    return false;  // refused at once by serve()
  }
}

// With wait_ms: answered when the run is terminal, or at the deadline as it stands.
Response serve_get(Context& context, const Call& call) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(read_get(call));
  const RunId id = run_parameter(call, 0);
  for (;;) {
    ledger::Run run = context.ledger.get(id);
    if (ledger::is_terminal(run.status) || std::chrono::steady_clock::now() >= deadline ||
        context.watch.shutting_down()) {
      return Response::json(200, run_json(context, run));
    }
    // Only the run's end wakes this wait, not its entries.
    context.watch.wait(id, std::numeric_limits<std::int64_t>::max(), deadline);
  }
}

struct ListCall {
  std::optional<ledger::RunStatus> status;
  std::optional<std::string> thread_key;
  std::optional<std::string> requester;
  paging::PageRequest page;
};

ListCall read_list(const Call& call) {
  only_parameters(call, {"status", "thread_key", "requester", "limit", "cursor"});
  ListCall out;
  if (auto s = call.request.parameter("status")) out.status = ledger::parse_run_status(*s);
  out.thread_key = call.request.parameter("thread_key");
  out.requester = call.request.parameter("requester");
  const int given = out.status.has_value() + out.thread_key.has_value() + out.requester.has_value();
  if (given != 1) {
    throw InvalidArgument("list runs by exactly one of status, thread_key and requester",
                          {{"field", "status"}});
  }
  if (out.thread_key) check_key(*out.thread_key, "thread_key");
  if (out.requester) check_key(*out.requester, "requester");
  out.page.limit =
      static_cast<int>(integer_parameter(call, "limit", 1, paging::kMaxLimit).value_or(100));
  out.page.cursor = call.request.parameter("cursor");
  return out;
}

void check_list(const Call& call) {
  const auto list = read_list(call);
  (void)list;
}

Response serve_list(Context& context, const Call& call) {
  const ListCall list = read_list(call);
  auto page = list.status       ? context.ledger.runs_with_status(*list.status, list.page)
              : list.thread_key ? context.ledger.runs_in_thread(*list.thread_key, list.page)
                                : context.ledger.runs_of_requester(*list.requester, list.page);
  std::vector<RunId> ids;
  for (const auto& run : page.items) ids.push_back(run.run_id);
  const auto records = context.store.run_records(ids);
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& run : page.items) {
    auto json = ledger::to_json(run);
    for (const auto& [id, record] : records) {
      if (id == run.run_id) {
        json["transcript"] = head_json(record.head);
        json["steps"] = record.steps;
      }
    }
    runs.push_back(std::move(json));
  }
  return Response::json(
      200, {{"runs", runs},
            {"next", page.next_cursor ? nlohmann::json(*page.next_cursor) : nlohmann::json()}});
}

struct FinishCall {
  Generation generation;
  ledger::RunStatus status;
  nlohmann::json result;
};

FinishCall read_finish(const Call& call) {
  run_parameter(call, 0);
  const auto json = json_body(call);
  wire::Object body(json);
  const Generation generation(body.int64("generation", 1));
  const std::string status = body.string("status");
  if (status != "finished" && status != "failed") wire::refuse("status", "finished or failed");
  FinishCall out{generation, ledger::parse_run_status(status),
                 body.optional_any("result").value_or(nullptr)};
  body.finish();
  return out;
}

void check_finish(const Call& call) {
  read_finish(call);
}

Response serve_finish(Context& context, const Call& call) {
  const FinishCall finish = read_finish(call);
  const RunId run = run_parameter(call, 0);
  context.ledger.finish(run, finish.generation, finish.status, finish.result);
  return Response::json(200, run_json(context, context.ledger.get(run)));
}

void check_release(const Call& call) {
  generation_body(call);
}

Response serve_release(Context& context, const Call& call) {
  const Generation generation = generation_body(call);
  const RunId run = run_parameter(call, 0);
  context.ledger.release(run, generation);
  return Response::json(200, run_json(context, context.ledger.get(run)));
}

void check_nothing(const Call&) {}

Response serve_healthz(Context&, const Call&) {
  return Response::json(200, {{"ok", true}});
}

Response serve_readyz(Context& context, const Call&) {
  try {
    context.pool.ping();
  } catch (const Unavailable& e) {
    // Anyone may ask: the answer names no host, port or database; the log keeps the cause.
    spdlog::warn("readyz: {}", e.what());
    throw Unavailable("the database is not reachable");
  }
  return Response::json(200, {{"ok", true}, {"database", "ok"}});
}

}  // namespace

nlohmann::json run_json(Context& context, const ledger::Run& run) {
  auto json = ledger::to_json(run);
  const auto records = context.store.run_records({run.run_id});
  if (!records.empty()) {
    json["transcript"] = head_json(records[0].second.head);
    json["steps"] = records[0].second.steps;
  }
  return json;
}

const std::vector<Route> kRunRoutes = {
    {"POST", "/v1/runs", "runs.dispatch", tokens::Scope::bot, BodyKind::json, kDispatchLimit,
     check_dispatch, serve_dispatch},
    {"GET", "/v1/runs", "runs.list", tokens::Scope::bot, BodyKind::none, 0, check_list, serve_list},
    {"GET", "/v1/runs/{}", "runs.get", tokens::Scope::bot, BodyKind::none, 0, check_get, serve_get,
     get_waits},
    {"POST", "/v1/runs/{}/finish", "runs.finish", tokens::Scope::bot, BodyKind::json, kMiB,
     check_finish, serve_finish},
    {"POST", "/v1/runs/{}/release", "runs.release", tokens::Scope::bot, BodyKind::json, kMiB,
     check_release, serve_release},
};

const std::vector<Route> kHealthRoutes = {
    {"GET", "/healthz", "healthz", std::nullopt, BodyKind::none, 0, check_nothing, serve_healthz},
    {"GET", "/readyz", "readyz", std::nullopt, BodyKind::none, 0, check_nothing, serve_readyz},
};

}  // namespace runledger::server
