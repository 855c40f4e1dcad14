// `runledger bot`: the reference bot process. It boots (slot, reclaim, settle), drives runs with
// their scripted model until SIGTERM or SIGINT, then hands them off and exits 0.
#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>

#include "bot/bot.h"
#include "cli/cli.h"
#include "failpoint/failpoint.h"
#include "migrations/migrations.h"

namespace runledger::cli {
namespace {

boot::Process* running_process = nullptr;

extern "C" void request_handoff(int) {
  if (running_process != nullptr) running_process->request_stop();  // an atomic store
}

int bot(const Arguments& args) {
  failpoint::arm_from_environment();
  const std::string url = database_url();
  migrations::apply(url);
  const std::filesystem::path work = args.value("--work-dir");
  const std::filesystem::path effects_log =
      args.text("--effects-log").value_or((work / "effects.log").string());
  std::filesystem::create_directories(work);
  if (effects_log.has_parent_path()) std::filesystem::create_directories(effects_log.parent_path());

  boot::Options options;
  options.slot = SlotName(args.value("--slot"));
  options.capacity = args.integer("--capacity").value();
  options.settlement.max_takeovers_without_progress = args.integer("--max-takeovers").value();
  settlement::EffectClasses classes = bot::reference_effect_classes();
  if (const auto file = args.text("--effect-classes")) {
    classes = settlement::EffectClasses::load(*file);
  }
  ledger::Options ledger_options;
  if (const auto ms = args.integer("--lease-ms")) {
    ledger_options.lease_ttl = std::chrono::milliseconds(*ms);
    options.safety_margin = ledger_options.lease_ttl / 6;
  }

  auto driver =
      std::make_shared<bot::ScriptedDriver>(tools::ToolsOptions{work / "sandboxes", effects_log});
  boot::Process process(url, ledger_options, {}, std::move(classes), options, driver);
  // Cleared on every way out (run() throws when the slot is lost): a later signal must not reach
  // a destroyed Process.
  struct Handling {
    explicit Handling(boot::Process& p) {
      running_process = &p;
      std::signal(SIGTERM, request_handoff);
      std::signal(SIGINT, request_handoff);
    }
    ~Handling() { running_process = nullptr; }
  } handling(process);
  process.boot();
  process.run();
  return 0;
}

}  // namespace

Command bot_command() {
  const boot::Options defaults;
  return {
      .name = "bot",
      .summary =
          "the reference bot: drives runs whose profile carries a script (README); "
          "SIGTERM hands its runs off and exits 0",
      .description =
          "It migrates first, then boots: takes its slot, reclaims the runs it "
          "owned, settles their open steps.",
      .options =
          {
              {.name = "--slot",
               .value = "NAME",
               .help = "the stable name of this bot, e.g. bot-1",
               .required = true},
              {.name = "--work-dir",
               .value = "DIR",
               .help = "its sandboxes and effects log",
               .fallback = ".runledger/bot"},
              {.name = "--effects-log",
               .value = "FILE",
               .help = "the file its tools' effects are appended to (default "
                       "--work-dir/effects.log)"},
              {.name = "--capacity",
               .value = "N",
               .help = "runs driven at once",
               .integer = kPositive,
               .fallback = std::to_string(defaults.capacity)},
              {.name = "--effect-classes",
               .value = "FILE",
               .help = "the effect classes of its tools, a class and its glob patterns per "
                       "line, e.g. `pure: read_file grep_*` (default the reference bot's)"},
              {.name = "--lease-ms",
               .value = "N",
               .help = "the lease of its runs in milliseconds; the safety margin is a sixth "
                       "(default " +
                       std::to_string(ledger::Options{}.lease_ttl.count()) + ")",
               .integer = kPositive},
              {.name = "--max-takeovers",
               .value = "N",
               .help = "claims of a run without a completed step after which it is interrupted",
               .integer = kPositive,
               .fallback = std::to_string(defaults.settlement.max_takeovers_without_progress)},
          },
      .run = bot,
  };
}

}  // namespace runledger::cli
