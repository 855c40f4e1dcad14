// POST /v1/runs/claim and POST /v1/leases/heartbeat: HTTP slots claim and keep runs.
#include "errors/errors.h"
#include "server/context.h"
#include "server/routes.h"
#include "settlement/settlement.h"
#include "timestamps/timestamps.h"

namespace runledger::server {
namespace {

constexpr int kMaxClaim = 100;
constexpr std::int64_t kMaxWaitMs = 30'000;
constexpr std::size_t kMaxHeartbeatRuns = 1000;

// An incarnation is a UUID, dashed or as 32 hex digits.
IncarnationId incarnation_field(wire::Object& body) {
  std::string text = body.string("incarnation");
  if (text.size() == 32 && text.find('-') == std::string::npos) {
    text = text.substr(0, 8) + "-" + text.substr(8, 4) + "-" + text.substr(12, 4) + "-" +
           text.substr(16, 4) + "-" + text.substr(20);
  }
  if (!is_uuid(text)) wire::refuse("incarnation", "a UUID (dashed, or 32 hex digits)");
  return IncarnationId(canonical_uuid(text, "incarnation"));
}

ledger::Owner http_owner(const std::string& slot, const IncarnationId& incarnation) {
  return {SlotName(std::string(ledger::kHttpSlotPrefix) + slot), incarnation};
}

// A bot token with a slot glob serves only the slots it names.
void check_slot_allowed(const Call& call, const std::string& slot) {
  const auto& token = *call.caller;
  if (token.slots && !settlement::glob_match(*token.slots, slot)) {
    throw Forbidden("this token may not serve slot " + slot, {{"slot", slot}});
  }
}

struct ClaimRequest {
  std::string slot;
  IncarnationId incarnation;
  int max;
  std::int64_t wait_ms;
};

ClaimRequest read_claim(const Call& call) {
  const auto json = json_body(call);
  wire::Object body(json);
  ClaimRequest out{key_field(body, "slot"), incarnation_field(body),
                   static_cast<int>(body.optional_int64("max", 1, kMaxClaim).value_or(1)),
                   body.optional_int64("wait_ms", 0, kMaxWaitMs).value_or(0)};
  body.finish();
  return out;
}

void check_claim(const Call& call) {
  read_claim(call);
}

bool claim_waits(const Call& call) {
  try {
    return read_claim(call).wait_ms > 0;
  } catch (const Error&) {
    return false;  // refused at once by serve()
  }
}

Response serve_claim(Context& context, const Call& call) {
  const ClaimRequest request = read_claim(call);
  check_slot_allowed(call, request.slot);
  const ledger::Owner owner = http_owner(request.slot, request.incarnation);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(request.wait_ms);
  for (;;) {
    if (context.slots.enter(request.slot, request.incarnation).superseded_another) {
      // The old incarnation's open long-polls answer `superseded` now, not at their deadline.
      context.waiters.wake_slot(request.slot);
    }
    // The runs of the slot's older incarnations first: this one is their owner now.
    auto claims = context.ledger.take_over_slot(owner, request.max);
    if (static_cast<int>(claims.size()) < request.max) {
      auto more = context.ledger.claim_next(owner, request.max - static_cast<int>(claims.size()));
      for (auto& c : more) claims.push_back(std::move(c));
    }
    const auto now = std::chrono::steady_clock::now();
    if (!claims.empty() || now >= deadline) {
      nlohmann::json runs = nlohmann::json::array();
      for (const auto& c : claims) {
        runs.push_back({{"run_id", c.run.run_id.value()},
                        {"generation", c.run.generation.value()},
                        {"reclaimed", c.taken_over},
                        {"lease_expires_at", timestamps::rfc3339(c.run.lease_expires_at.value())}});
      }
      return Response::json(200, {{"runs", runs}});
    }
    if (!context.waiters.wait(request.slot, std::min(deadline, now + context.options.claim_poll))) {
      return Response::json(200, {{"runs", nlohmann::json::array()}});  // shutting down
    }
  }
}

struct HeartbeatRequest {
  IncarnationId incarnation;
  std::vector<std::pair<RunId, Generation>> runs;
};

HeartbeatRequest read_heartbeat(const Call& call) {
  const auto json = json_body(call);
  wire::Object body(json);
  HeartbeatRequest out{incarnation_field(body), {}};
  const auto runs = body.array("runs");
  if (runs.size() > kMaxHeartbeatRuns) wire::refuse("runs", "at most 1000 runs");
  for (const auto& value : runs) {
    wire::Object run = value.object();
    out.runs.emplace_back(RunId(run.uuid("run_id")), Generation(run.int64("generation", 1)));
    run.finish();
  }
  body.finish();
  return out;
}

void check_heartbeat(const Call& call) {
  read_heartbeat(call);
}

Response serve_heartbeat(Context& context, const Call& call) {
  const HeartbeatRequest request = read_heartbeat(call);
  const std::string slot = context.slots.slot_of(request.incarnation);
  check_slot_allowed(call, slot);
  const auto leases =
      context.ledger.extend_leases(http_owner(slot, request.incarnation), request.runs);
  nlohmann::json lost = nlohmann::json::array();
  for (const auto& run : leases.lost) lost.push_back(run.value());
  return Response::json(
      200, {{"lost", lost},
            {"lease_expires_at", leases.lease_expires_at
                                     ? nlohmann::json(timestamps::rfc3339(*leases.lease_expires_at))
                                     : nlohmann::json()}});
}

}  // namespace

const std::vector<Route> kClaimRoutes = {
    {"POST", "/v1/runs/claim", "runs.claim", tokens::Scope::bot, BodyKind::json, kMiB, check_claim,
     serve_claim, claim_waits},
    {"POST", "/v1/leases/heartbeat", "leases.heartbeat", tokens::Scope::bot, BodyKind::json, kMiB,
     check_heartbeat, serve_heartbeat},
};

}  // namespace runledger::server
