// Real child processes for tests: the runledger executable started with its own arguments and
// environment, waited for or killed like any process.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace runledger::testing {

// Starts `binary` with `args` (argv[1..]); `env` sets (a value) or unsets (nullopt) variables on
// top of the test's environment; `output`, when given, is the file the child's stdout and stderr
// go to (truncated), instead of the test's own; `error_output`, when given too, takes stderr.
inline pid_t spawn(const std::string& binary, const std::vector<std::string>& args,
                   const std::map<std::string, std::optional<std::string>>& env = {},
                   const std::optional<std::string>& output = std::nullopt,
                   const std::optional<std::string>& error_output = std::nullopt) {
  std::vector<std::string> argv_storage = {"runledger"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid != 0) return pid;
  for (const auto& [name, value] : env) {
    if (value) {
      setenv(name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
  if (output) {
    const int fd = ::open(output->c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(error_output ? ::open(error_output->c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644) : fd,
         STDERR_FILENO);
  }
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(binary.c_str(), argv.data());
  _exit(127);
}

// The exit code, or 128 + the signal that ended it.
inline int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace runledger::testing
