// `runledger token create | list | revoke`: the HTTP API's tokens (tokens/tokens.h). A created
// token is printed once, alone on the last line of standard output, so that a script can take it
// with `tail -n 1`; nothing else ever prints a token.
#include <iostream>

#include "cli/cli.h"
#include "tokens/tokens.h"

namespace runledger::cli {
namespace {

std::optional<std::filesystem::path> root_of(const Arguments& args) {
  if (const auto dir = args.text("--root")) return std::filesystem::path(*dir);
  return std::nullopt;
}

// The database of `--root DIR` (a running `runledger up --root DIR`) unless DATABASE_URL is set.
struct Session {
  explicit Session(const Arguments& args) : pool(database_url(root_of(args)), 1), tokens(pool) {}
  pg::Pool pool;
  tokens::Tokens tokens;
};

int token_create(const Arguments& args) {
  // Checked before connecting: a bad scope is the caller's, whatever the database says.
  const tokens::Scope scope = tokens::parse_scope(args.value("--scope"));
  const std::string name = args.value("--name");
  Session s(args);
  const auto created = s.tokens.create(scope, name, args.text("--slots"));
  std::cout << "created " << tokens::to_json(created.info).dump()
            << "; the token is shown this once:\n"
            << created.token << std::endl;
  return 0;
}

int token_list(const Arguments& args) {
  Session s(args);
  for (const auto& info : s.tokens.list()) std::cout << tokens::to_json(info).dump() << "\n";
  return 0;
}

int token_revoke(const Arguments& args) {
  const std::string name = args.positional("NAME");
  Session s(args);
  std::cout << tokens::to_json(s.tokens.revoke(name)).dump() << "\n";
  return 0;
}

}  // namespace

Command token_command() {
  const Option root{.name = "--root",
                    .value = "DIR",
                    .help =
                        "without DATABASE_URL, the database of the `runledger up --root DIR` "
                        "running there (DIR/database_url)"};
  return {
      .name = "token",
      .summary = "create, list and revoke the HTTP API's tokens",
      .subcommands =
          {
              {.name = "create",
               .summary = "create a token and print it, once, alone on the last line",
               .options = {{.name = "--scope",
                            .value = "S",
                            .help = "bot, coordinator or operator (an operator token passes "
                                    "every scope)",
                            .required = true},
                           {.name = "--name",
                            .value = "N",
                            .help = "the token's name: one live token per name",
                            .required = true},
                           {.name = "--slots",
                            .value = "GLOB",
                            .help = "for a bot token: the slots it may serve (`*` and `?`); "
                                    "by default any"},
                           root},
               .run = token_create},
              {.name = "list",
               .summary = "list tokens, newest first, one JSON object a line (never a secret)",
               .options = {root},
               .run = token_list},
              {.name = "revoke",
               .summary = "revoke the live token named NAME; servers refuse it within a second",
               .options = {root},
               .positionals = {{.name = "NAME", .help = "the token's name"}},
               .run = token_revoke},
          },
      .default_subcommand = "list",
  };
}

}  // namespace runledger::cli
