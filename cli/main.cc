// runledger: a durable run ledger for AI-agent bots. See README.md.
#include <spdlog/spdlog.h>

#include <cstdio>

#include "cli/cli.h"
#include "errors/errors.h"

namespace runledger::cli {

Command program() {
  return {
      .name = "runledger",
      .summary = "runledger: a durable run ledger for AI-agent bots.",
      .subcommands = {up_command(), serve_command(), demo_command(), service_command(),
                      migrate_command(), dispatch_command(), runs_command(), sweep_command(),
                      bot_command(), coordinator_command(), instances_command(), ship_command(),
                      threads_command(), policy_command(), merge_actor_command(), token_command(),
                      db_url_command()},
      .footer =
          "Commands other than `up` use DATABASE_URL, or the database of a running "
          "`runledger up` started in the current directory.\n\n"
          "Exit codes: 0 done, 2 invalid argument, 3 not found, 4 conflict, 5 fenced, "
          "6 budget exhausted, 7 unavailable, 8 step failed, 9 non-deterministic workflow, "
          "10 not authenticated or not allowed, 1 anything else.",
  };
}

}  // namespace runledger::cli

namespace {

// The one place expected outcomes become exit codes.
int exit_code(runledger::ErrorCode code) {
  switch (code) {
    case runledger::ErrorCode::invalid_argument:
    case runledger::ErrorCode::malformed:
    case runledger::ErrorCode::too_large:
    case runledger::ErrorCode::unsupported_media_type:
      return 2;
    case runledger::ErrorCode::not_found:
      return 3;
    case runledger::ErrorCode::conflict:
    case runledger::ErrorCode::thread_busy:
    case runledger::ErrorCode::superseded:
      return 4;
    case runledger::ErrorCode::fenced:
      return 5;
    case runledger::ErrorCode::budget_exhausted:
      return 6;
    case runledger::ErrorCode::unavailable:
      return 7;
    case runledger::ErrorCode::step_failed:
      return 8;
    case runledger::ErrorCode::nondeterministic:
      return 9;
    case runledger::ErrorCode::unauthenticated:
    case runledger::ErrorCode::forbidden:
      return 10;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace runledger;
  const cli::Command program = cli::program();
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(cli::usage(program, program.name).c_str(), stdout);
    return 0;
  }
  // Every argument is checked before the command does anything.
  std::optional<cli::CommandLine> line;
  try {
    line = cli::parse_command_line(program, args);
  } catch (const InvalidArgument& e) {
    const std::string where = e.details().value("command", program.name);
    std::fprintf(stderr, "%s: %s: %s\n", where.c_str(), std::string(to_string(e.code())).c_str(),
                 e.what());
    if (where == program.name) {
      std::fputs(cli::usage(program, program.name).c_str(), stderr);
    } else {
      std::fprintf(stderr, "see `%s --help`\n", where.c_str());
    }
    return exit_code(e.code());
  }
  if (line->command == nullptr) {
    std::fputs(line->usage.c_str(), stdout);
    return 0;
  }
  try {
    return line->command->run(*line->arguments);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s: %s\n", line->path.c_str(),
                 std::string(to_string(e.code())).c_str(), e.what());
    return exit_code(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", line->path.c_str(), e.what());
    return 1;
  }
}
