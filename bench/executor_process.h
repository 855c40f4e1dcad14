// An executor in a process of its own, for the benches that measure across processes: the bench
// re-executes itself with `--executor URL` (ExecutorProcess), and that mode runs the bench's
// workflows until SIGTERM (run_executor_until_sigterm). Private to bench/.
#pragma once

#include <string>
#include <string_view>

#include "coordinator/coordinator.h"
#include "subprocess/subprocess.h"

namespace runledger::bench {

// The --executor mode: runs `registry`'s workflows on `threads` threads until SIGTERM; returns
// the process's exit code.
int run_executor_until_sigterm(const std::string& url, const coordinator::Registry& registry,
                               int threads);

// This program re-executed as `<program> --executor URL`; stopped with SIGTERM (and waited for)
// when this goes, and sent SIGTERM by the kernel should this process die first.
class ExecutorProcess {
 public:
  ExecutorProcess(std::string_view program, const std::string& url);
  ~ExecutorProcess();
  ExecutorProcess(const ExecutorProcess&) = delete;
  ExecutorProcess& operator=(const ExecutorProcess&) = delete;
  pid_t pid() const { return child_.pid(); }

 private:
  subprocess::Child child_;
};

}  // namespace runledger::bench
