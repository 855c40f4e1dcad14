// An executor process for the crash sweep: `sweep_executor DATABASE_URL LOG_FILE`. Runs the sweep
// workflows ("sweep", and the saga "saga" with its compensations) until SIGTERM; branches of
// all() one at a time, so that the k-th journal write is the same write in every execution. With
// RUNLEDGER_FAILPOINTS="coordinator.after_write=kill@K" it kills itself with SIGKILL right after
// its K-th journal write; at SIGTERM it prints how many journal writes it made (when that failpoint
// is armed, with a K it never reaches).
#include <signal.h>

#include <cstdio>
#include <memory>

#include "coordinator/coordinator.h"
#include "failpoint/failpoint.h"
#include "tests/coordinator/sweep_workflow.h"

namespace {
runledger::coordinator::Executor* volatile running = nullptr;
volatile sig_atomic_t stop_requested = 0;
void on_signal(int) {
  stop_requested = 1;
  if (running) running->request_stop();
}
}  // namespace

int main(int argc, char** argv) {
  using namespace runledger;
  if (argc != 3) {
    std::fprintf(stderr, "usage: sweep_executor DATABASE_URL LOG_FILE\n");
    return 2;
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  failpoint::arm_from_environment();
  coordinator::Registry registry;
  coordinator::Registration r;
  r.name = "sweep";
  r.workflow = std::make_shared<testing::SweepWorkflow>(argv[2]);
  registry.add(std::move(r));
  coordinator::Registration saga;
  saga.name = "saga";
  saga.workflow = std::make_shared<testing::SagaSweepWorkflow>(argv[2]);
  registry.add(std::move(saga));
  testing::SagaSweepWorkflow::register_compensations(registry, argv[2]);
  coordinator::Options options;
  options.threads = 1;
  options.max_branch_threads = 1;
  options.poll_interval = std::chrono::milliseconds(500);
  coordinator::Executor executor(argv[1], registry, "sweep-" + std::to_string(getpid()), options);
  running = &executor;
  if (stop_requested) executor.request_stop();  // a signal that came before `running` was set
  executor.run();
  std::printf("journal writes: %llu\n",
              static_cast<unsigned long long>(failpoint::hits("coordinator.after_write")));
  return 0;
}
