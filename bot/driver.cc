#include <spdlog/spdlog.h>

#include <functional>
#include <map>
#include <optional>

#include "bot/bot.h"
#include "errors/errors.h"
#include "failpoint/failpoint.h"

namespace runledger::bot {
namespace {

using nlohmann::json;
using transcript::EntryKind;
using transcript::StepOutcome;

using Vars = std::map<std::string, std::string>;

std::string substitute(std::string text, const Vars& vars) {
  for (const auto& [name, value] : vars) {
    const std::string token = "${" + name + "}";
    for (auto at = text.find(token); at != std::string::npos;
         at = text.find(token, at + value.size())) {
      text.replace(at, token.size(), value);
    }
  }
  return text;
}

json substitute(const json& j, const Vars& vars) {
  if (j.is_string()) return substitute(j.get<std::string>(), vars);
  if (!j.is_structured()) return j;
  json out = j;
  for (auto& item : out.items()) item.value() = substitute(item.value(), vars);
  return out;
}

// Text that is not UTF-8 (a binary file read) is replaced, not rejected, in these JSON bodies.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// What the model does next, decided from the record alone (so a successor decides the same).
struct Next {
  bool done = false;
  int script_turn = 0;
  bool recheck = false;
  json calls = json::array();
  std::int64_t last_turn_seq = 0;  // the newest assistant entry's seq (0: none)
  bool last_was_final = false;
};

Next decide_next_turn(transcript::Store& store, const RunId& run, const json& turns) {
  const auto last = store.last_entry(run, EntryKind::assistant);
  Next next;
  if (last) next.last_turn_seq = last->seq;
  if (last) {
    const json turn = json::parse(last->body);
    if (turn.value("final", false)) {
      next.done = next.last_was_final = true;
      return next;
    }
    next.script_turn = turn["script_turn"].get<int>() + 1;
    if (!turn.value("recheck", false)) {
      // Calls of that turn whose results came back synthetic: the model re-checks them first.
      std::map<std::string, transcript::StepState> states;
      for (const auto& step : store.steps(run)) states[step.call_id] = step.state;
      json rechecks = json::array();
      for (const auto& call : turns[turn["script_turn"].get<std::size_t>()]["calls"]) {
        const auto it = states.find(call["id"].get<std::string>());
        if (it != states.end() && it->second == transcript::StepState::settled) {
          for (const auto& again : call.value("if_restarted", json::array()))
            rechecks.push_back(again);
        }
      }
      if (!rechecks.empty()) {
        next.script_turn = turn["script_turn"].get<int>();
        next.recheck = true;
        next.calls = rechecks;
        return next;
      }
    }
  }
  if (next.script_turn >= static_cast<int>(turns.size())) {
    next.done = true;
    return next;
  }
  next.calls = turns[static_cast<std::size_t>(next.script_turn)].value("calls", json::array());
  return next;
}

// A run's writes, each repeated through transient database failures while the run is ours.
class Writes {
 public:
  Writes(boot::RunContext& context, const pg::Backoff& backoff)
      : context_(context), backoff_(backoff), run_(context.claim().run.run_id) {}

  // Repeats `write`; before a repeat that follows a failure whose commit outcome is unknown,
  // `landed` (when given) says whether that try committed after all, with its result.
  template <class T>
  T persist(const std::function<T()>& write,
            const std::function<std::optional<T>()>& landed = nullptr) {
    bool maybe_landed = false;
    return pg::retry_unavailable(
        backoff_,
        [&]() -> T {
          if (maybe_landed && landed) {
            if (auto result = landed()) return *result;
          }
          try {
            return write();
          } catch (const Unavailable& e) {
            maybe_landed = maybe_landed || e.outcome_unknown();
            spdlog::warn("run {}: {}", run_.value(), e.what());
            throw;
          }
        },
        [&] { return !context_.lost(); });
  }

  // Reads are safe to repeat as they are.
  template <class F>
  auto read(F&& fn) -> decltype(fn()) {
    return pg::retry_unavailable(backoff_, std::forward<F>(fn), [&] { return !context_.lost(); });
  }

  // Appends `body` once: an append whose outcome is unknown is found in the transcript (an entry
  // of `kind` after `after_seq` with these bytes: only this driver appends to the run) before it
  // is repeated.
  std::int64_t append(Generation generation, EntryKind kind, const std::string& body,
                      std::int64_t after_seq) {
    auto& store = context_.store();
    return persist<std::int64_t>([&] { return store.append(run_, generation, kind, body); },
                                 [&]() -> std::optional<std::int64_t> {
                                   const auto last = store.last_entry(run_, kind);
                                   if (last && last->seq > after_seq && last->body == body) {
                                     return last->seq;
                                   }
                                   return std::nullopt;
                                 });
  }

 private:
  boot::RunContext& context_;
  const pg::Backoff& backoff_;
  const RunId run_;
};

}  // namespace

settlement::EffectClasses reference_effect_classes() {
  return settlement::EffectClasses::parse("pure: read_file\nidempotent: write_file\n");
}

ScriptedDriver::ScriptedDriver(tools::ToolsOptions tools, pg::Backoff write_backoff)
    : tools_(std::move(tools)), write_backoff_(write_backoff) {}

settlement::Callbacks ScriptedDriver::callbacks(const ledger::Run&) {
  return {
      [](std::string_view turn) {
        std::vector<settlement::ToolCall> calls;
        const json parsed = json::parse(turn);
        for (const auto& c : parsed.value("calls", json::array())) {
          calls.push_back({c["id"].get<std::string>(), c["tool"].get<std::string>(), c["args"]});
        }
        return calls;
      },
      [this](const settlement::ToolCall& call, const settlement::ToolContext& context) {
        return tools_.run(call, context);
      },
      [](const settlement::ToolCall& call, const StepOutcome& outcome) {
        return dump({{"call_id", call.call_id},
                     {"tool", call.tool},
                     {"state", transcript::to_string(outcome.state)},
                     {"output", outcome.state == transcript::StepState::failed ? outcome.error
                                                                               : outcome.result}});
      },
  };
}

bool ScriptedDriver::drive(boot::RunContext& context) {
  auto& store = context.store();
  auto& ledger = context.ledger();
  const ledger::Run& run = context.claim().run;
  const Generation generation = run.generation;
  Writes writes(context, write_backoff_);
  // A finish whose outcome is unknown landed if the run ended as this generation said.
  const auto finish = [&](ledger::RunStatus status, const json& result) {
    writes.persist<bool>(
        [&] {
          ledger.finish(run.run_id, generation, status, result);
          return true;
        },
        [&]() -> std::optional<bool> {
          const auto now = ledger.get(run.run_id);
          if (now.status == status && now.generation == generation) return true;
          return std::nullopt;
        });
  };
  const json script = run.profile.value("script", json());
  if (!script.is_object() || !script.value("turns", json()).is_array()) {
    finish(ledger::RunStatus::failed, {{"error", "the run's profile has no script"}});
    return false;
  }
  Vars vars = {{"run_id", run.run_id.value()}};
  const json script_vars = script.value("vars", json::object());
  for (const auto& [name, value] : script_vars.items()) {
    vars[name] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  const auto to_result = callbacks(run).tool_result;
  StepNo next_step = writes.read([&] { return store.next_step_no(run.run_id); });
  try {
    for (;;) {
      if (context.lost()) return false;
      if (context.stop_requested()) return true;  // between turns: a safe point
      const Next next =
          writes.read([&] { return decide_next_turn(store, run.run_id, script["turns"]); });
      if (next.done) {
        if (!next.last_was_final) {
          writes.append(generation, EntryKind::assistant,
                        dump({{"final", true}, {"text", "The work is done."}}), next.last_turn_seq);
        }
        finish(ledger::RunStatus::finished, substitute(script.value("result", json()), vars));
        return false;
      }
      json calls = json::array();
      for (const auto& call : next.calls) {
        calls.push_back({{"id", call["id"]},
                         {"tool", call["tool"]},
                         {"args", substitute(call.value("args", json::object()), vars)}});
      }
      const json turn = {
          {"script_turn", next.script_turn},
          {"recheck", next.recheck},
          {"text", next.recheck ? json("The process restarted; re-checking before going on.")
                                : script["turns"][next.script_turn].value("text", json(""))},
          {"calls", calls}};
      writes.append(generation, EntryKind::assistant, dump(turn), next.last_turn_seq);
      failpoint::hit("bot.after_turn_append");
      for (const auto& c : calls) {
        // Calls of this turn not started yet are settled as never started by whoever resumes.
        if (context.stop_requested()) return true;
        if (!context.may_start_tool()) return false;
        const settlement::ToolCall call{c["id"], c["tool"], c["args"]};
        const transcript::StepIntent intent{next_step, call.tool, call.call_id, call.args};
        // The identical intent repeated returns the same key.
        const std::string key = writes.persist<std::string>(
            [&] { return store.begin_step(run.run_id, generation, intent); });
        failpoint::hit("bot.after_intent");
        if (!context.may_start_tool()) return false;  // the self-fence, right before the effect
        const StepOutcome outcome = tools_.run(call, {run.run_id, generation, key});
        failpoint::hit("bot.after_effect");
        // The identical completion repeated is a no-op.
        writes.persist<bool>([&] {
          store.complete_step(run.run_id, generation, next_step, outcome);
          return true;
        });
        failpoint::hit("bot.after_completion");
        const std::string result = to_result(call, outcome);
        writes.persist<bool>(
            [&] {
              store.append_tool_result(run.run_id, generation, next_step, result);
              return true;
            },
            [&]() -> std::optional<bool> {
              for (const auto& step : store.steps(run.run_id)) {
                if (step.step_no == next_step && step.result_seq) return true;
              }
              return std::nullopt;
            });
        next_step = StepNo(next_step.value() + 1);
      }
    }
  } catch (const BudgetExhausted& e) {
    spdlog::warn("run {}: {}", run.run_id.value(), e.what());  // the ledger finished it failed
    return false;
  }
}

}  // namespace runledger::bot
