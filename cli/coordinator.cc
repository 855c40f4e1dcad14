// `runledger coordinator`: runs the coordinator's executor with the built-in workflows
// (cli/workflows.h) until SIGTERM or SIGINT, then exits 0.
#include <unistd.h>

#include <climits>
#include <csignal>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "cli/cli.h"
#include "cli/workflows.h"
#include "coordinator/coordinator.h"
#include "coordinator/ship/ship.h"
#include "errors/errors.h"
#include "failpoint/failpoint.h"
#include "migrations/migrations.h"

namespace runledger::cli {
namespace {

coordinator::Executor* running_executor = nullptr;

extern "C" void request_executor_stop(int) {
  if (running_executor != nullptr) running_executor->request_stop();  // an atomic store
}

void check_flags(const Args& args) {
  static const std::set<std::string> known = {"--threads",      "--lease-ms",    "--poll-ms",
                                              "--ship-repo",    "--deploy-root", "--merge-poll-ms",
                                              "--review-rounds"};
  for (std::size_t i = 0; i < args.size(); i += 2) {
    if (!known.contains(args[i])) {
      throw InvalidArgument("unexpected argument '" + args[i].substr(0, 64) +
                            "' (coordinator [--threads N] [--lease-ms N] [--poll-ms N] "
                            "[--ship-repo BARE_REPO --deploy-root DIR [--merge-poll-ms N] "
                            "[--review-rounds N]])");
    }
  }
}

std::string executor_id() {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
    return "coordinator-localhost-" + std::to_string(getpid());
  }
  return "coordinator-" + std::string(host) + "-" + std::to_string(getpid());
}

}  // namespace

int run_coordinator(const Args& args) {
  check_flags(args);
  coordinator::Options options;
  options.threads = positive(args, "--threads", options.threads);
  options.poll_interval =
      std::chrono::milliseconds(positive(args, "--poll-ms", int(options.poll_interval.count())));
  ledger::Options ledger_options;
  // The executor's claims and heartbeats use the ledger options' lease; both are kept equal.
  options.lease_ttl =
      std::chrono::milliseconds(positive(args, "--lease-ms", int(options.lease_ttl.count())));
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
  if (const auto repo = flag(args, "--ship-repo")) {
    const auto deploy_root = flag(args, "--deploy-root");
    if (!deploy_root) throw InvalidArgument("--ship-repo needs --deploy-root");
    ship::ShipOptions ship_options;
    ship_options.repository = std::filesystem::absolute(*repo);
    ship_options.merge_poll = std::chrono::milliseconds(
        positive(args, "--merge-poll-ms", int(ship_options.merge_poll.count())));
    ship_options.review_rounds = positive(args, "--review-rounds", ship_options.review_rounds);
    forge = std::make_unique<ship::LocalForge>(ports_pool, ship_options.repository);
    deployer = std::make_unique<ship::LocalDeployer>(ports_pool, ship_options.repository,
                                                     std::filesystem::absolute(*deploy_root));
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

}  // namespace runledger::cli
