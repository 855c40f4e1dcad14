// Commands that read or change the ledger from the shell.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>

#include "cli/cli.h"
#include "errors/errors.h"
#include "ledger/ledger.h"
#include "migrations/migrations.h"

namespace runledger::cli {
namespace {

struct Session {
  pg::Pool pool{database_url(), 1};
  ledger::Ledger ledger{pool};
};

void print(const nlohmann::json& j) {
  std::cout << j.dump(2) << "\n";
}

int migrate(const Arguments&) {
  const auto done = migrations::apply(database_url());
  for (const auto& m : done) std::cout << "applied " << m.name << "\n";
  if (done.empty()) std::cout << "up to date\n";
  return 0;
}

int db_url(const Arguments&) {
  std::cout << database_url() << "\n";
  return 0;
}

int dispatch(const Arguments& args) {
  ledger::DispatchRequest r;
  r.dispatch_key = args.value("--key");
  r.thread_key = args.value("--thread");
  r.requester = args.value("--requester");
  if (auto profile = args.text("--profile")) {
    try {
      r.profile = nlohmann::json::parse(*profile);
    } catch (const nlohmann::json::parse_error&) {
      throw InvalidArgument("--profile is not valid JSON");
    }
  }
  if (args.given("--wall-s") || args.given("--max-steps")) {
    const ledger::Budget fallback = ledger::Options{}.default_budget;
    r.budget = ledger::Budget{args.integer("--wall-s").value_or(fallback.wall_s),
                              args.integer("--max-steps").value_or(fallback.max_steps)};
  }
  if (auto parent = args.text("--parent-run")) r.parent_run = RunId::parse(*parent);
  r.parent_instance = args.text("--parent-instance");
  Session s;
  const auto d = s.ledger.dispatch(r);
  print({{"created", d.created}, {"run", ledger::to_json(d.run)}});
  return 0;
}

int runs_ls(const Arguments& args) {
  ledger::RunFilter filter;
  if (auto status = args.text("--status")) filter.status = ledger::parse_run_status(*status);
  filter.thread_key = args.text("--thread");
  filter.limit = args.integer("--limit").value();
  Session s;
  std::printf("%-36s  %-11s  %4s  %-12s  %-24s  %s\n", "RUN", "STATUS", "GEN", "OWNER", "THREAD",
              "CREATED");
  for (const auto& run : s.ledger.list(filter)) {
    std::printf("%-36s  %-11s  %4lld  %-12s  %-24s  %s\n", run.run_id.value().c_str(),
                std::string(to_string(run.status)).c_str(),
                static_cast<long long>(run.generation.value()),
                run.owner ? run.owner->slot.value().c_str() : "-", run.thread_key.c_str(),
                run.created_at.c_str());
  }
  return 0;
}

int runs_show(const Arguments& args) {
  const RunId run = RunId::parse(args.positional("RUN_ID"));
  Session s;
  print(ledger::to_json(s.ledger.get(run)));
  return 0;
}

int runs_cancel(const Arguments& args) {
  const RunId run = RunId::parse(args.positional("RUN_ID"));
  const std::string by = args.value("--by");
  Session s;
  s.ledger.cancel(run, by);
  print(ledger::to_json(s.ledger.get(run)));
  return 0;
}

int sweep(const Arguments&) {
  Session s;
  std::cout << "deleted " << s.ledger.sweep_retention() << " runs\n";
  return 0;
}

}  // namespace

Command migrate_command() {
  return {.name = "migrate",
          .summary = "apply pending migrations (also automatic at start)",
          .run = migrate};
}

Command db_url_command() {
  return {.name = "db-url", .summary = "print the database URL commands use", .run = db_url};
}

Command dispatch_command() {
  return {
      .name = "dispatch",
      .summary = "create a run (or find the one its dispatch key already created), print it",
      .options =
          {
              {.name = "--key",
               .value = "K",
               .help = "the dispatch key: a second dispatch with it returns the same run",
               .required = true},
              {.name = "--thread", .value = "T", .help = "the chat thread", .required = true},
              {.name = "--requester", .value = "R", .help = "who asked", .required = true},
              {.name = "--profile", .value = "JSON", .help = "the run's profile (JSON)"},
              {.name = "--wall-s",
               .value = "N",
               .help = "wall-clock budget in seconds",
               .integer = kPositive,
               .fallback = std::to_string(ledger::Options{}.default_budget.wall_s)},
              {.name = "--max-steps",
               .value = "N",
               .help = "tool calls the run may make",
               .integer = kPositive,
               .fallback = std::to_string(ledger::Options{}.default_budget.max_steps)},
              {.name = "--parent-run", .value = "ID", .help = "the run this one is a child of"},
              {.name = "--parent-instance",
               .value = "ID",
               .help = "the workflow instance this run is a child of"},
          },
      .run = dispatch,
  };
}

Command runs_command() {
  const Positional run_id{.name = "RUN_ID", .help = "the run's id (a UUID)"};
  return {
      .name = "runs",
      .summary = "list, show and cancel runs",
      .subcommands =
          {
              {.name = "ls",
               .summary = "list runs, newest first",
               .options = {{.name = "--status",
                            .value = "S",
                            .help = "only runs in status S: queued, running, finished, failed, "
                                    "interrupted or cancelled"},
                           {.name = "--thread", .value = "T", .help = "only the runs of thread T"},
                           {.name = "--limit",
                            .value = "N",
                            .help = "at most N runs",
                            .integer = kPositive,
                            .fallback = "50"}},
               .run = runs_ls},
              {.name = "show",
               .summary = "print a run (JSON)",
               .positionals = {run_id},
               .run = runs_show},
              {.name = "cancel",
               .summary = "cancel a run, print it",
               .options = {{.name = "--by",
                            .value = "NAME",
                            .help = "who cancels (recorded with the run)",
                            .required = true}},
               .positionals = {run_id},
               .run = runs_cancel},
          },
      .default_subcommand = "ls",
  };
}

Command sweep_command() {
  return {.name = "sweep", .summary = "delete terminal runs past retention now", .run = sweep};
}

}  // namespace runledger::cli
