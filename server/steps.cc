// The write-ahead step record over HTTP: turns, intents, completions, the record, settlement.
#include "digest/digest.h"
#include "errors/errors.h"
#include "server/context.h"
#include "server/routes.h"
#include "timestamps/timestamps.h"
#include "wire/wire.h"

namespace runledger::server {
namespace {

constexpr std::size_t kMaxIntentsPerTurn = 1000;

Generation generation_field(wire::Object& body) {
  return Generation(body.int64("generation", 1));
}

transcript::StepIntent intent_of(wire::Object& fields) {
  transcript::StepIntent intent{StepNo(fields.int64("step_no", 1)), key_field(fields, "tool"),
                                key_field(fields, "call_id"),
                                fields.optional_any("args").value_or(nlohmann::json::object())};
  if (!intent.args.is_object()) wire::refuse(fields.name_of("args"), "a JSON object");
  return intent;
}

// A body larger than an entry may be (decoded) is 413 whichever way it was sent.
void check_entry_bytes(const std::string& bytes, std::string_view field) {
  if (bytes.size() > kMaxEntryBytes) {
    throw TooLarge(std::string(field) + " is larger than the 64 MiB an entry may hold",
                   {{"field", field}, {"limit", kMaxEntryBytes}});
  }
}

struct TurnCall {
  Generation generation;
  std::optional<std::int64_t> expected_seq;
  std::string body;
  std::vector<transcript::StepIntent> intents;
};

TurnCall read_turn(const Call& call) {
  run_parameter(call, 0);
  const auto json = json_body(call);
  wire::Object body(json);
  TurnCall out{generation_field(body),
               body.optional_int64("expected_seq", 1),
               body.base64("body_base64"),
               {}};
  check_entry_bytes(out.body, "body_base64");
  if (auto intents = body.optional_array("intents")) {
    if (intents->size() > kMaxIntentsPerTurn) wire::refuse("intents", "at most 1000 intents");
    for (const auto& value : *intents) {
      wire::Object fields = value.object();
      out.intents.push_back(intent_of(fields));
    }
  }
  body.finish();
  return out;
}

void check_turn(const Call& call) {
  read_turn(call);
}

Response serve_turn(Context& context, const Call& call) {
  const TurnCall turn = read_turn(call);
  const auto written = context.store.append_turn_at(run_parameter(call, 0), turn.generation,
                                                    turn.body, turn.intents, turn.expected_seq);
  return Response::json(200, {{"seq", written.seq}, {"effect_keys", written.effect_keys}});
}

struct IntentCall {
  Generation generation;
  transcript::StepIntent intent;
};

IntentCall read_intent(const Call& call) {
  run_parameter(call, 0);
  const auto json = json_body(call);
  wire::Object body(json);
  IntentCall out{generation_field(body), intent_of(body)};
  body.finish();
  return out;
}

void check_intent(const Call& call) {
  read_intent(call);
}

Response serve_intent(Context& context, const Call& call) {
  const IntentCall intent = read_intent(call);
  const std::string key =
      context.store.begin_step(run_parameter(call, 0), intent.generation, intent.intent);
  return Response::json(
      200, {{"effect_key", key},
            {"effect_class",
             settlement::to_string(context.options.effect_classes.classify(intent.intent.tool))}});
}

struct CompletionCall {
  Generation generation;
  StepNo step;
  transcript::StepOutcome outcome;
  std::optional<std::string> tool_result;
};

StepNo step_parameter(const Call& call) {
  return StepNo(number_parameter(call, 1, "step_no"));
}

CompletionCall read_completion(const Call& call) {
  run_parameter(call, 0);
  const StepNo step = step_parameter(call);
  const auto json = json_body(call);
  wire::Object body(json);
  const Generation generation = generation_field(body);
  const auto result = body.optional_any("result");
  const auto result_bytes = body.optional_base64("result_base64");
  const auto error = body.optional_string("error");
  if (result.has_value() + result_bytes.has_value() + error.has_value() != 1) {
    wire::refuse("result", "exactly one of result, result_base64 and error");
  }
  CompletionCall out{
      generation, step,
      error ? transcript::StepOutcome::failure(*error)
            : transcript::StepOutcome::success(result ? result->dump() : *result_bytes),
      body.optional_base64("tool_result_base64")};
  check_entry_bytes(out.outcome.result, result ? "result" : "result_base64");
  if (out.tool_result) check_entry_bytes(*out.tool_result, "tool_result_base64");
  body.finish();
  return out;
}

void check_completion(const Call& call) {
  read_completion(call);
}

nlohmann::json step_json(const Context& context, const transcript::Step& s) {
  const auto optional_generation = [](const std::optional<Generation>& g) {
    return g ? nlohmann::json(g->value()) : nlohmann::json();
  };
  return {{"step_no", s.step_no.value()},
          {"tool", s.tool},
          {"call_id", s.call_id},
          {"args", s.args},
          {"effect_key", s.effect_key},
          {"effect_class", settlement::to_string(context.options.effect_classes.classify(s.tool))},
          {"state", transcript::to_string(s.state)},
          {"intent_generation", s.intent_generation.value()},
          {"result_generation", optional_generation(s.result_generation)},
          {"result_bytes", s.result ? nlohmann::json(s.result->size()) : nlohmann::json()},
          {"error", s.error ? nlohmann::json(*s.error) : nlohmann::json()},
          {"settlement", s.settlement},
          {"result_seq", s.result_seq ? nlohmann::json(*s.result_seq) : nlohmann::json()},
          {"started_at", timestamps::rfc3339(s.started_at)},
          {"finished_at",
           s.finished_at ? nlohmann::json(timestamps::rfc3339(*s.finished_at)) : nlohmann::json()}};
}

Response serve_completion(Context& context, const Call& call) {
  const CompletionCall c = read_completion(call);
  const RunId run = run_parameter(call, 0);
  if (c.tool_result) {
    context.store.complete_with_result(run, c.generation, c.step, c.outcome, *c.tool_result);
  } else {
    context.store.complete_step(run, c.generation, c.step, c.outcome);
  }
  for (const auto& s : context.store.steps(run)) {
    if (s.step_no == c.step) return Response::json(200, step_json(context, s));
  }
  throw NotFound("step " + std::to_string(c.step.value()) + " is gone");  // the run was swept
}

void check_steps(const Call& call) {
  run_parameter(call, 0);
  only_parameters(call, {});
}

Response serve_steps(Context& context, const Call& call) {
  check_steps(call);
  const RunId run = run_parameter(call, 0);
  context.ledger.get(run);  // NotFound for an unknown run, rather than no steps
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : context.store.steps(run)) steps.push_back(step_json(context, s));
  return Response::json(200, {{"steps", steps}});
}

void check_settle(const Call& call) {
  generation_body(call);
}

Response serve_settle(Context& context, const Call& call) {
  const Generation generation = generation_body(call);
  const auto settled = context.settler.settle_for_holder(run_parameter(call, 0), generation);
  nlohmann::json done = nlohmann::json::array();
  for (const auto& s : settled.settled) {
    done.push_back({{"step_no", s.step.value()},
                    {"rule", settlement::to_string(s.rule)},
                    {"effect_key", s.effect_key}});
  }
  nlohmann::json rerun = nlohmann::json::array();
  for (const auto& r : settled.rerun) {
    rerun.push_back({{"step_no", r.step.value()},
                     {"rule", settlement::to_string(r.rule)},
                     {"tool", r.call.tool},
                     {"call_id", r.call.call_id},
                     {"args", r.call.args},
                     {"effect_key", r.effect_key}});
  }
  return Response::json(
      200, {{"settled", done}, {"rerun", rerun}, {"interrupted", settled.interrupted}});
}

}  // namespace

// Turns and completions carry an entry in base64: their limit is that of the transcript.
const std::vector<Route> kStepRoutes = {
    {"POST", "/v1/runs/{}/turns", "runs.turns", tokens::Scope::bot, BodyKind::json,
     kMaxBase64EntryRequest, check_turn, serve_turn},
    {"POST", "/v1/runs/{}/steps", "runs.intent", tokens::Scope::bot, BodyKind::json, kMiB,
     check_intent, serve_intent},
    {"POST", "/v1/runs/{}/steps/{}/complete", "runs.complete", tokens::Scope::bot, BodyKind::json,
     kMaxBase64EntryRequest, check_completion, serve_completion},
    {"GET", "/v1/runs/{}/steps", "runs.steps", tokens::Scope::bot, BodyKind::none, 0, check_steps,
     serve_steps},
    {"POST", "/v1/runs/{}/settle", "runs.settle", tokens::Scope::bot, BodyKind::json, kMiB,
     check_settle, serve_settle},
};

}  // namespace runledger::server
