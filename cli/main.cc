// runledger: a durable run ledger for AI-agent bots. See README.md.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <functional>
#include <map>

#include "cli/cli.h"
#include "errors/errors.h"

namespace {

constexpr const char* kUsage = R"(usage: runledger COMMAND [ARGS]

  up [--root DIR] [--no-demo]
                            start the embedded PostgreSQL (unless DATABASE_URL is set), migrate,
                            and supervise the service, a coordinator running ship, bot-1 and a
                            merge actor until Ctrl-C; the first start of a database runs the demo
  demo --root DIR           the first-start demo: a chat request shipped end to end (once)
  service                   run the service against DATABASE_URL (started by `up`)
  migrate                   apply pending migrations
  dispatch --key K --thread T --requester R [--profile JSON] [--wall-s N] [--max-steps N]
                            [--parent-run ID] [--parent-instance ID]
  runs ls [--status S] [--thread T] [--limit N]
  runs show RUN_ID
  runs cancel RUN_ID --by NAME
  sweep                     delete terminal runs past retention now
  bot --slot NAME [--work-dir DIR] [--effects-log FILE] [--capacity N]
      [--effect-classes FILE] [--lease-ms N] [--max-takeovers N]
                            the reference bot: drives runs whose profile carries a script
                            (README); SIGTERM hands its runs off and exits 0
  coordinator [--threads N] [--lease-ms N] [--poll-ms N]
              [--ship-repo BARE_REPO --deploy-root DIR [--merge-poll-ms N] [--review-rounds N]]
                            run the workflow coordinator (built-in workflows: demo.approval,
                            and ship when --ship-repo is given) until SIGTERM or SIGINT
  instances create --workflow W --id ID [--input JSON]
  instances ls [--status S] [--limit N]
  instances show ID         the instance and its steps
  instances history ID
  instances send-event ID --type T [--payload JSON] [--dedupe-key K] [--by NAME]
  instances pause|resume|terminate ID --by NAME
  instances terminate ID --by NAME --rollback
                            run the compensations of its succeeded steps first
  instances restart ID --step NAME#COUNT --by NAME
                            operator actions, each in the instance's history with NAME
  ship --thread T --message M --requester U [--review-verdicts approve,changes,...] "request"
                            start the ship pipeline for a chat message (once per message)
  threads show T            the messages posted to chat thread T
  policy grant|revoke --requester U --capability C
  merge-actor --ship-repo BARE_REPO [--delay-ms N]
                            merge approved change requests after a delay (stands in for a
                            person, in tests and the demo)
  db-url                    print the database URL commands use

Commands other than `up` use DATABASE_URL, or the database of a running `runledger up` started
in the current directory.
)";

// The one place expected outcomes become exit codes.
int exit_code(runledger::ErrorCode code) {
  switch (code) {
    case runledger::ErrorCode::invalid_argument:
      return 2;
    case runledger::ErrorCode::not_found:
      return 3;
    case runledger::ErrorCode::conflict:
      return 4;
    case runledger::ErrorCode::fenced:
      return 5;
    case runledger::ErrorCode::budget_exhausted:
      return 6;
    case runledger::ErrorCode::unavailable:
      return 7;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace runledger;
  const std::map<std::string, std::function<int(const cli::Args&)>> commands = {
      {"up", cli::up},
      {"service", cli::service},
      {"migrate", cli::migrate},
      {"dispatch", cli::dispatch},
      {"runs", cli::runs},
      {"sweep", cli::sweep},
      {"db-url", cli::db_url},
      {"bot", cli::bot},
      {"coordinator", cli::run_coordinator},
      {"instances", cli::instances},
      {"ship", cli::ship_command},
      {"threads", cli::threads},
      {"policy", cli::policy},
      {"merge-actor", cli::merge_actor},
      {"demo", cli::demo},
  };
  if (argc < 2 || !commands.contains(argv[1])) {
    std::fputs(kUsage, argc < 2 ? stdout : stderr);
    return argc < 2 ? 0 : 2;
  }
  const cli::Args args(argv + 2, argv + argc);
  try {
    return commands.at(argv[1])(args);
  } catch (const Error& e) {
    std::fprintf(stderr, "runledger %s: %s: %s\n", argv[1],
                 std::string(to_string(e.code())).c_str(), e.what());
    return exit_code(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "runledger %s: %s\n", argv[1], e.what());
    return 1;
  }
}
