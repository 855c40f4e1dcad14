// An executor in a process of its own: the child side (until SIGTERM) and the parent side.
#include "bench/executor_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>

namespace runledger::bench {
namespace {

coordinator::Executor* g_executor = nullptr;
void stop_executor(int) {
  if (g_executor) g_executor->request_stop();  // async-signal-safe
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

ExecutorProcess::ExecutorProcess(std::string_view program, const std::string& url) {
  const std::string name(program);
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    execl("/proc/self/exe", name.c_str(), "--executor", url.c_str(), nullptr);
    _exit(127);
  }
}

ExecutorProcess::~ExecutorProcess() {
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
}

}  // namespace runledger::bench
