// Child processes with captured output, and durable one-line appends: what the tools of the
// reference bot and the local ports of the ship pipeline (git) need.
//
// Contract: run_child() forks, and the child (cwd `dir`, stdin /dev/null, stdout and stderr on one
// pipe, every other descriptor closed) execs argv[0] searched on PATH with the inherited
// environment plus `extra_env` (replacing variables of the same names). The parent captures up to
// `max_output` bytes, drains the rest, and stops reading once the child has exited and the pipe is
// momentarily empty (so a background grandchild holding the pipe does not block it).
// append_line() writes `line` with one write() on an O_APPEND descriptor, then fsyncs.
// Both throw std::system_error on a failed system call.
//
// Thread-safety: both are thread-safe.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace runledger::subprocess {

struct ChildResult {
  bool exited;         // false: killed by a signal
  int code;            // exit status, or the signal number
  std::string output;  // stdout and stderr merged, at most max_output bytes
  bool truncated;      // output past max_output was dropped
};

ChildResult run_child(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::string>>& extra_env,
                      const std::filesystem::path& dir, std::size_t max_output);

void append_line(const std::filesystem::path& file, const std::string& line);

}  // namespace runledger::subprocess
