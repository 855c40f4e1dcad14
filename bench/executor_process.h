// An executor in a process of its own, for the benches that measure across processes: the bench
// re-executes itself with `--executor URL` (ExecutorProcess), and that mode runs the bench's
// workflows until SIGTERM (run_executor_until_sigterm). Private to bench/.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "coordinator/coordinator.h"

namespace runledger::bench {

// The --executor mode: runs `registry`'s workflows on `threads` threads until SIGTERM; returns
// the process's exit code.
int run_executor_until_sigterm(const std::string& url, const coordinator::Registry& registry,
                               int threads);

// This program re-executed as `<program> --executor URL`; stopped with SIGTERM (and waited for)
// when this goes.
class ExecutorProcess {
 public:
  ExecutorProcess(std::string_view program, const std::string& url);
  ~ExecutorProcess();
  ExecutorProcess(const ExecutorProcess&) = delete;
  ExecutorProcess& operator=(const ExecutorProcess&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

}  // namespace runledger::bench
