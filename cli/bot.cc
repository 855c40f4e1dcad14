// `runledger bot`: the reference bot process. It boots (slot, reclaim, settle), drives runs with
// their scripted model until SIGTERM or SIGINT, then hands them off and exits 0.
#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>

#include "bot/bot.h"
#include "cli/cli.h"
#include "errors/errors.h"
#include "failpoint/failpoint.h"
#include "migrations/migrations.h"

namespace runledger::cli {
namespace {

boot::Process* running_process = nullptr;

extern "C" void request_handoff(int) {
  if (running_process != nullptr) running_process->request_stop();  // an atomic store
}

}  // namespace

int bot(const Args& args) {
  failpoint::arm_from_environment();
  const std::string url = database_url();
  migrations::apply(url);
  const auto slot = flag(args, "--slot");
  if (!slot) throw InvalidArgument("--slot is required (the stable name of this bot, e.g. bot-1)");
  const std::filesystem::path work = flag(args, "--work-dir").value_or(".runledger/bot");
  const std::filesystem::path effects_log =
      flag(args, "--effects-log").value_or((work / "effects.log").string());
  std::filesystem::create_directories(work);
  if (effects_log.has_parent_path()) std::filesystem::create_directories(effects_log.parent_path());

  boot::Options options;
  options.slot = SlotName(*slot);
  options.capacity = positive(args, "--capacity", options.capacity);
  options.settlement.max_takeovers_without_progress =
      positive(args, "--max-takeovers", options.settlement.max_takeovers_without_progress);
  settlement::EffectClasses classes = bot::reference_effect_classes();
  if (const auto file = flag(args, "--effect-classes")) {
    classes = settlement::EffectClasses::load(*file);
  }
  ledger::Options ledger_options;
  if (const auto ms = flag(args, "--lease-ms")) {
    ledger_options.lease_ttl = std::chrono::milliseconds(positive(args, "--lease-ms", 30'000));
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

}  // namespace runledger::cli
