// `runledger coordinator`: runs the coordinator's executor with the built-in workflows
// (cli/workflows.h) until SIGTERM or SIGINT, then exits 0.
#include <unistd.h>

#include <climits>
#include <csignal>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/cli.h"
#include "cli/workflows.h"
#include "coordinator/coordinator.h"
#include "failpoint/failpoint.h"
#include "migrations/migrations.h"
#include "ship/ship.h"

namespace runledger::cli {
namespace {

coordinator::Executor* running_executor = nullptr;

extern "C" void request_executor_stop(int) {
  if (running_executor != nullptr) running_executor->request_stop();  // an atomic store
}

std::string executor_id() {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
    return "coordinator-localhost-" + std::to_string(getpid());
  }
  return "coordinator-" + std::string(host) + "-" + std::to_string(getpid());
}

int run_coordinator(const Arguments& args) {
  coordinator::Options options;
  options.threads = args.integer("--threads").value();
  options.poll_interval = std::chrono::milliseconds(args.integer("--poll-ms").value());
  ledger::Options ledger_options;
  // The executor's claims and heartbeats use the ledger options' lease; both are kept equal.
  options.lease_ttl = std::chrono::milliseconds(args.integer("--lease-ms").value());
  ledger_options.lease_ttl = options.lease_ttl;

  failpoint::arm_from_environment();
  const std::string url = database_url();
  migrations::apply(url);
  // The ship pipeline runs here when its repository is given, on local ports.
  pg::Pool ports_pool(url, 4);
  ledger::Ledger ledger(ports_pool, ledger_options);
  std::unique_ptr<ship::LocalForge> forge;
  std::unique_ptr<ship::LocalDeployer> deployer;
  ship::ThreadOutbox outbox(ports_pool);
  ship::Policy policy(ports_pool);
  std::shared_ptr<coordinator::Workflow> pipeline;
  if (const auto repo = args.text("--ship-repo")) {
    ship::ShipOptions ship_options;
    ship_options.repository = std::filesystem::absolute(*repo);
    ship_options.merge_poll = std::chrono::milliseconds(args.integer("--merge-poll-ms").value());
    ship_options.review_rounds = args.integer("--review-rounds").value();
    forge = std::make_unique<ship::LocalForge>(ports_pool, ship_options.repository);
    deployer = std::make_unique<ship::LocalDeployer>(
        ports_pool, ship_options.repository,
        std::filesystem::absolute(args.value("--deploy-root")));
    pipeline = std::make_shared<ship::ShipWorkflow>(ship_options, *forge, *deployer, outbox, policy,
                                                    ledger);
  }
  const coordinator::Registry registry = builtin_workflows(pipeline);
  coordinator::Executor executor(url, registry, executor_id(), options, ledger_options);
  running_executor = &executor;
  std::signal(SIGTERM, request_executor_stop);
  std::signal(SIGINT, request_executor_stop);
  executor.run();
  running_executor = nullptr;
  return 0;
}

}  // namespace

Command coordinator_command() {
  const coordinator::Options defaults;
  const ship::ShipOptions ship_defaults;
  return {
      .name = "coordinator",
      .summary =
          "run the workflow coordinator (built-in workflows: demo.approval, and ship when "
          "--ship-repo is given) until SIGTERM or SIGINT",
      .description = "It migrates first; its executor id is coordinator-<hostname>-<pid>.",
      .options =
          {
              {.name = "--threads",
               .value = "N",
               .help = "executor threads, each replaying one instance at a time",
               .integer = kPositive,
               .fallback = std::to_string(defaults.threads)},
              {.name = "--lease-ms",
               .value = "N",
               .help = "the instance lease in milliseconds",
               .integer = kPositive,
               .fallback = std::to_string(defaults.lease_ttl.count())},
              {.name = "--poll-ms",
               .value = "N",
               .help = "milliseconds between polls for due instances (NOTIFY wakes it sooner)",
               .integer = kPositive,
               .fallback = std::to_string(defaults.poll_interval.count())},
              {.name = "--ship-repo",
               .value = "BARE_REPO",
               .help = "run the ship pipeline on this bare git repository",
               .needs = {"--deploy-root"}},
              {.name = "--deploy-root",
               .value = "DIR",
               .help = "where the ship pipeline deploys",
               .needs = {"--ship-repo"}},
              {.name = "--merge-poll-ms",
               .value = "N",
               .help = "milliseconds between the ship pipeline's polls of the forge while "
                       "it waits for the merge",
               .integer = kPositive,
               .fallback = std::to_string(ship_defaults.merge_poll.count()),
               .needs = {"--ship-repo"}},
              {.name = "--review-rounds",
               .value = "N",
               .help = "the most review rounds of one change request (a fix follows each "
                       "`changes` verdict)",
               .integer = kPositive,
               .fallback = std::to_string(ship_defaults.review_rounds),
               .needs = {"--ship-repo"}},
          },
      .run = run_coordinator,
  };
}

}  // namespace runledger::cli
