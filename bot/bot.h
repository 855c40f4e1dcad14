// The reference bot: drives runs with a scripted model and the reference tools, so that runs are
// deterministic and a crash at any point can be replayed.
//
// The script is JSON in the run's profile, under "script":
//   {"vars": {"branch": "fix-1"},                       // ${name} substitutions (plus ${run_id})
//    "turns": [{"text": "...", "calls": [{"id": "c1", "tool": "bash",
//                                        "args": {"command": "git push origin ${branch}"},
//                                        "if_restarted": [{"id": "c1-check", ...}]}]}, ...],
//    "result": {...}}                                     // the run's result when the script ends
// Each turn is one assistant entry; its calls run in order, each written ahead (intent), run,
// completed, and its tool_result appended as separate writes, with failpoints between them:
// bot.after_turn_append, bot.after_intent, bot.after_effect, bot.after_completion. When a call's
// result came back synthetic (settlement did not re-run it), the model's next turn is that call's
// `if_restarted` calls (a model that re-checks, as the synthetic result asks), then the script
// goes on. After the last turn the bot appends a final assistant entry and finishes the run with
// `result`.
//
// A write that meets a transient database failure (Unavailable) is repeated with a bounded,
// jittered backoff while the run is still ours: intents and completions are idempotent, and an
// append whose commit outcome is unknown is looked up in the transcript before it is repeated, so
// an entry is never written twice. A driver that gives up throws Unavailable out of drive(), and
// boot/ settles and drives the run again.
//
// Thread-safety: ScriptedDriver is thread-safe; each drive() works on its own run.
#pragma once

#include <nlohmann/json.hpp>

#include "boot/boot.h"
#include "tools/tools.h"

namespace runledger::bot {

class ScriptedDriver : public boot::RunDriver {
 public:
  explicit ScriptedDriver(tools::ToolsOptions tools, pg::Backoff write_backoff = {});

  settlement::Callbacks callbacks(const ledger::Run& run) override;
  // Writes through context.ledger() and context.store().
  bool drive(boot::RunContext& context) override;

 private:
  tools::Tools tools_;
  pg::Backoff write_backoff_;
};

// The effect classes of the reference tools.
settlement::EffectClasses reference_effect_classes();

}  // namespace runledger::bot
