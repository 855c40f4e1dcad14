#include <algorithm>
#include <set>

#include "errors/errors.h"
#include "settlement/settlement.h"

namespace runledger::settlement {
namespace {

using transcript::Step;
using transcript::StepOutcome;
using transcript::StepState;

ToolCall call_of(const Step& step) {
  return {step.call_id, step.tool, step.args};
}

StepOutcome recorded_outcome(const Step& step) {
  if (step.state == StepState::failed) return StepOutcome::failure(step.error.value_or(""));
  if (step.state == StepState::settled) return StepOutcome::settled(step.result.value_or(""));
  return StepOutcome::success(step.result.value_or(""));
}

nlohmann::json record(Rule rule, Generation generation, EffectClass effect_class) {
  return {{"rule", to_string(rule)},
          {"generation", generation.value()},
          {"effect_class", to_string(effect_class)}};
}

// The newest generation that completed a step (0: none ever did).
std::int64_t progress_generation(const std::vector<Step>& steps) {
  std::int64_t newest = 0;
  for (const auto& s : steps) {
    if (s.result_generation) newest = std::max(newest, s.result_generation->value());
  }
  return newest;
}

}  // namespace

std::string_view to_string(Rule rule) {
  switch (rule) {
    case Rule::rerun_pure:
      return "rerun_pure";
    case Rule::rerun_idempotent:
      return "rerun_idempotent";
    case Rule::synthetic_unsafe:
      return "synthetic_unsafe";
    case Rule::append_missing_result:
      return "append_missing_result";
    case Rule::run_never_started:
      return "run_never_started";
  }
  return "unknown";
}

std::string synthetic_message(const ToolCall& call, std::string_view effect_key) {
  return "The process running this conversation restarted while the tool call `" + call.tool +
         "` (call id " + call.call_id + ", effect key " + std::string(effect_key) +
         ") was in flight. It was not run again, and whether it took effect is unknown. Before "
         "repeating it, check whether its effect already happened (for example: is the branch "
         "already pushed, does the file or the pull request already exist?) and repeat it only "
         "if it did not. Where a tool accepts an idempotency key, pass the effect key " +
         std::string(effect_key) + ".";
}

Settler::Settler(ledger::Ledger& ledger, transcript::Store& store, EffectClasses classes,
                 Options options)
    : ledger_(ledger), store_(store), classes_(std::move(classes)), options_(options) {}

Resume Settler::settle(const ledger::Claim& claim, const Callbacks& callbacks) {
  const RunId& run = claim.run.run_id;
  const Generation g = claim.run.generation;
  const auto steps = store_.steps(run);

  const std::int64_t stalled = g.value() - std::max<std::int64_t>(progress_generation(steps), 1);
  if (claim.taken_over && stalled >= options_.max_takeovers_without_progress) {
    ledger_.finish(run, g, ledger::RunStatus::interrupted,
                   {{"error", "stalled"},
                    {"claims_without_progress", stalled},
                    {"message", "the run was taken over " + std::to_string(stalled) +
                                    " times without completing a step"}});
    return {true,
            store_.count_entries(run, transcript::EntryKind::assistant),
            store_.next_step_no(run),
            {}};
  }

  Resume resume{false, 0, StepNo(1), {}};
  std::set<std::string> call_ids;
  for (const auto& step : steps) {
    call_ids.insert(step.call_id);
    const ToolCall call = call_of(step);
    const EffectClass effect_class = classes_.classify(step.tool);
    if (step.state == StepState::intent) {
      Rule rule = Rule::synthetic_unsafe;
      StepOutcome outcome = StepOutcome::settled(synthetic_message(call, step.effect_key));
      if (effect_class != EffectClass::unsafe) {
        rule = effect_class == EffectClass::pure ? Rule::rerun_pure : Rule::rerun_idempotent;
        outcome = callbacks.run_tool(call, {run, g, step.effect_key});
      }
      store_.complete_with_result(run, g, step.step_no, outcome,
                                  callbacks.tool_result(call, outcome),
                                  record(rule, g, effect_class));
      resume.settled.push_back({step.step_no, rule});
    } else if (!step.result_seq) {
      store_.append_tool_result(run, g, step.step_no,
                                callbacks.tool_result(call, recorded_outcome(step)),
                                record(Rule::append_missing_result, g, effect_class));
      resume.settled.push_back({step.step_no, Rule::append_missing_result});
    }
  }

  if (const auto last_turn = store_.last_entry(run, transcript::EntryKind::assistant)) {
    StepNo next = store_.next_step_no(run);
    for (const auto& call : callbacks.tool_calls(last_turn->body)) {
      if (call_ids.contains(call.call_id)) continue;
      // Never started: it runs now, write-ahead like any call.
      const std::string key = store_.begin_step(run, g, {next, call.tool, call.call_id, call.args});
      const StepOutcome outcome = callbacks.run_tool(call, {run, g, key});
      store_.complete_with_result(run, g, next, outcome, callbacks.tool_result(call, outcome),
                                  record(Rule::run_never_started, g, classes_.classify(call.tool)));
      resume.settled.push_back({next, Rule::run_never_started});
      next = StepNo(next.value() + 1);
    }
  }
  resume.turn = store_.count_entries(run, transcript::EntryKind::assistant);
  resume.next_step = store_.next_step_no(run);
  return resume;
}

std::string holder_tool_result(const ToolCall& call, std::string_view effect_key,
                               const StepOutcome& outcome, bool synthetic) {
  const bool failed = outcome.state == StepState::failed;
  return nlohmann::json{{"type", "tool_result"},
                        {"call_id", call.call_id},
                        {"tool", call.tool},
                        {"effect_key", effect_key},
                        {"synthetic", synthetic},
                        {"is_error", failed},
                        {"text", failed ? outcome.error : outcome.result}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HolderSettlement Settler::settle_for_holder(const RunId& run, Generation g) {
  const ledger::Run current = ledger_.get(run);
  if (current.status != ledger::RunStatus::running || current.generation != g) {
    ledger_.throw_refused(run, g, "settle");
  }
  const auto steps = store_.steps(run);
  const std::int64_t stalled = g.value() - std::max<std::int64_t>(progress_generation(steps), 1);
  if (current.takeovers > 0 && stalled >= options_.max_takeovers_without_progress) {
    ledger_.finish(run, g, ledger::RunStatus::interrupted,
                   {{"error", "stalled"},
                    {"claims_without_progress", stalled},
                    {"message", "the run was taken over " + std::to_string(stalled) +
                                    " times without completing a step"}});
    return {true, {}, {}};
  }
  HolderSettlement out{false, {}, {}};
  for (const auto& step : steps) {
    const ToolCall call = call_of(step);
    const EffectClass effect_class = classes_.classify(step.tool);
    if (step.state == StepState::intent) {
      if (effect_class == EffectClass::unsafe) {
        const StepOutcome outcome = StepOutcome::settled(synthetic_message(call, step.effect_key));
        store_.complete_with_result(run, g, step.step_no, outcome,
                                    holder_tool_result(call, step.effect_key, outcome, true),
                                    record(Rule::synthetic_unsafe, g, effect_class));
        out.settled.push_back({step.step_no, Rule::synthetic_unsafe, step.effect_key});
        continue;
      }
      const Rule rule =
          effect_class == EffectClass::pure ? Rule::rerun_pure : Rule::rerun_idempotent;
      // Recorded once, by the first generation that hands the call back.
      if (step.settlement.is_null()) {
        store_.record_settlement(run, g, step.step_no, record(rule, g, effect_class));
      }
      out.rerun.push_back({step.step_no, rule, call, step.effect_key});
    } else if (!step.result_seq) {
      const StepOutcome outcome = recorded_outcome(step);
      store_.append_tool_result(
          run, g, step.step_no,
          holder_tool_result(call, step.effect_key, outcome, step.state == StepState::settled),
          record(Rule::append_missing_result, g, effect_class));
      out.settled.push_back({step.step_no, Rule::append_missing_result, step.effect_key});
    }
  }
  return out;
}

}  // namespace runledger::settlement
