// Settlement: what a process that claimed a run mid-flight does with the tool calls its
// predecessor left unfinished, before the run's loop continues (docs/design.md, invariant 4).
//
// Contract, for each step of the run, in step order:
//  - intent without result, tool `pure` or `idempotent`: re-run through the bot's run_tool, and
//    recorded as that step's result under the new generation;
//  - intent without result, any other tool (`bash`, `git push`, GitHub writes, unknown tools):
//    NOT re-run. It is completed as `settled` with a synthetic result telling the model that the
//    process restarted while the call was in flight, that its effect is unknown and must be
//    re-checked before being repeated, naming the tool, the call id and the effect key;
//  - result recorded but never appended to the transcript: its tool_result entry is appended;
//  - a tool call of the last assistant turn with no intent at all never started: it runs now,
//    intent first, like any call.
// Each of these writes its tool_result entry and records on the step which rule settled it and
// under which generation. A run claimed K times (Options) since a generation last completed a step
// is finished `interrupted` instead of being resumed forever.
//
// The ledger never parses transcript bytes: the bot supplies them through Callbacks.
// Thread-safety: Settler is thread-safe; settle() of one run must not run twice at once (the
// claim that calls it owns the run).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ids/ids.h"
#include "ledger/ledger.h"
#include "transcript/transcript.h"

namespace runledger::settlement {

enum class EffectClass { pure, idempotent, unsafe };
std::string_view to_string(EffectClass c);

// Shell-style glob: `*` any run of characters, `?` one character.
bool glob_match(std::string_view pattern, std::string_view text);

// Tool effect classes from configuration; a tool no pattern matches is unsafe. Text format, a
// class and its glob patterns per line, `#` comments:
//   pure: read_file grep_* list_*
//   idempotent: write_file submit_*
class EffectClasses {
 public:
  EffectClasses() = default;  // every tool unsafe
  // InvalidArgument naming the line for anything else.
  static EffectClasses parse(std::string_view text);
  static EffectClasses load(const std::filesystem::path& file);
  // pure patterns are tried first, then idempotent ones.
  EffectClass classify(std::string_view tool) const;

 private:
  std::vector<std::string> pure_;
  std::vector<std::string> idempotent_;
};

enum class Rule {
  rerun_pure,
  rerun_idempotent,
  synthetic_unsafe,
  append_missing_result,
  run_never_started,
};
std::string_view to_string(Rule rule);

struct ToolCall {
  std::string call_id;
  std::string tool;
  nlohmann::json args;
};

// What a tool receives besides its arguments: the effect key to pass downstream as an idempotency
// key, and the generation, so a downstream system can refuse a writer older than one it has seen.
struct ToolContext {
  RunId run;
  Generation generation;
  std::string effect_key;
};

struct Callbacks {
  // The tool calls an assistant turn's bytes ask for, in order.
  std::function<std::vector<ToolCall>(std::string_view assistant_turn)> tool_calls;
  // Runs one tool.
  std::function<transcript::StepOutcome(const ToolCall&, const ToolContext&)> run_tool;
  // The bytes of a tool_result transcript entry for a call's outcome.
  std::function<std::string(const ToolCall&, const transcript::StepOutcome&)> tool_result;
};

struct Options {
  // Claims since the last generation that completed a step, after which the run is interrupted.
  int max_takeovers_without_progress = 3;
};

struct SettledStep {
  StepNo step;
  Rule rule;
};

struct Resume {
  bool interrupted;   // finished `interrupted` (with its event) instead of resumed
  std::int64_t turn;  // assistant entries so far: where the loop continues
  StepNo next_step;
  std::vector<SettledStep> settled;
};

// The synthetic result of an unsafe call that was in flight at a restart, in words for a model.
std::string synthetic_message(const ToolCall& call, std::string_view effect_key);

// Settlement for a holder that runs its tools itself, elsewhere (a bot over HTTP): the settler
// writes what it can alone and hands back the calls the holder must run again.
struct HolderStep {
  StepNo step;
  Rule rule;
  std::string effect_key;
};
struct RerunCall {
  StepNo step;
  Rule rule;
  ToolCall call;
  std::string effect_key;
};
struct HolderSettlement {
  bool interrupted;                 // finished `interrupted` by the stall rule
  std::vector<HolderStep> settled;  // written now: synthetic results, missing tool_result entries
  std::vector<RerunCall> rerun;     // pure and idempotent calls in flight: the holder's to run
};

// The tool_result entry the settler writes for such a holder, one documented JSON shape (bots
// translate it to their model provider's format):
//   {"type": "tool_result", "call_id", "tool", "effect_key", "synthetic", "is_error", "text"}
// `synthetic` is true for a result the settler made up (an unsafe call in flight at a restart);
// `text` is the tool's result or error as recorded (invalid UTF-8 replaced by U+FFFD).
std::string holder_tool_result(const ToolCall& call, std::string_view effect_key,
                               const transcript::StepOutcome& outcome, bool synthetic);

class Settler {
 public:
  Settler(ledger::Ledger& ledger, transcript::Store& store, EffectClasses classes,
          Options options = {});

  // Settles a run just claimed by `claim` (generation claim.run.generation). FencedError if
  // another process claims it meanwhile: the caller stops driving it.
  Resume settle(const ledger::Claim& claim, const Callbacks& callbacks);

  // Settles `run` for its holder under `generation` (after a reclaim or a release alike), in
  // step order: an unsafe call in flight gets its synthetic result, a result missing from the
  // transcript its tool_result entry (both holder_tool_result()), and a pure or idempotent call in
  // flight is returned in `rerun` with its rule recorded on the step. The tool calls of the last
  // turn that never started are the holder's to find (the settler never reads turns). The stall
  // rule applies when the run was ever taken over. Repeating it settles nothing more: the calls
  // still in flight come back in `rerun` again. FencedError if `generation` does not hold the run.
  HolderSettlement settle_for_holder(const RunId& run, Generation generation);

 private:
  ledger::Ledger& ledger_;
  transcript::Store& store_;
  EffectClasses classes_;
  Options options_;
};

}  // namespace runledger::settlement
