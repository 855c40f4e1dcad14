// An executor in a process of its own: the child side (until SIGTERM) and the parent side.
#include "bench/executor_process.h"

#include <signal.h>
#include <unistd.h>

namespace runledger::bench {
namespace {

coordinator::Executor* g_executor = nullptr;
void stop_executor(int) {
  if (g_executor) g_executor->request_stop();  // async-signal-safe
}

// This executable again, as `<program> --executor URL`.
subprocess::Spawn executor_command(std::string_view program, const std::string& url) {
  subprocess::Spawn command({std::string(program), "--executor", url});
  command.program = "/proc/self/exe";
  command.death_signal = SIGTERM;
  return command;
}

}  // namespace

int run_executor_until_sigterm(const std::string& url, const coordinator::Registry& registry,
                               int threads) {
  coordinator::Options options;
  options.threads = threads;
  coordinator::Executor executor(url, registry, "bench-executor-" + std::to_string(getpid()),
                                 options);
  g_executor = &executor;
  signal(SIGTERM, stop_executor);
  executor.run();
  g_executor = nullptr;
  return 0;
}

ExecutorProcess::ExecutorProcess(std::string_view program, const std::string& url)
    : child_(subprocess::spawn(executor_command(program, url))) {}

ExecutorProcess::~ExecutorProcess() {
  child_.kill(SIGTERM);
  child_.wait();
}

}  // namespace runledger::bench
