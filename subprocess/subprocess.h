// Child processes: the one way runledger starts a program (a short command whose output is
// captured, a long-lived supervised child, a program run as another OS user), and durable
// one-line appends.
//
// Contract:
//  - spawn(s) starts s.argv with an explicit argv (no shell). The file executed is s.program, or
//    argv[0] when that is empty; a name without '/' is searched on the child's PATH before fork.
//    Everything the child needs (argv, environment, descriptors, the user's groups) is prepared
//    before fork, so only async-signal-safe calls run between fork and exec: spawn() is safe in a
//    multi-threaded process. spawn() returns once the child has exec'd; when it could not
//    (no such program, no such cwd, the user switch refused) it throws std::system_error naming
//    the step, and no child is left.
//  - The child starts clean: stdin is /dev/null; stdout and stderr as s.output says; no other
//    descriptor of ours; every signal at its default disposition and none blocked, whatever the
//    spawning thread had (the parent blocks all signals across fork, so none of its handlers runs
//    in the child); its environment is ours with s.env applied (a value sets, nullopt unsets);
//    its working directory is s.cwd (empty: ours).
//  - s.user: the child switches to that uid, gid and supplementary groups before chdir and exec
//    (needs root). HOME and the rest of the environment stay as given: set them in s.env.
//  - s.death_signal: the kernel sends it to the child when the *thread* that called spawn() ends
//    (PR_SET_PDEATHSIG; with the process, after a kill -9 too), so spawn long-lived children from
//    a thread that lives as long as they may. A child whose parent is already gone exits at once.
//  - s.own_process_group: the child leads a new process group, and kill() signals the whole group
//    (its own children too). Otherwise it stays in ours (a terminal's Ctrl-C reaches it).
//  - Output::capture: stdout and stderr share one pipe that wait() and wait_for() read while they
//    wait, keeping the first s.capture_limit bytes (the rest is read and dropped: truncated()).
//    Reading stops once the child has exited and the pipe is momentarily empty, so a background
//    grandchild holding the pipe open does not hold up the wait.
//  - A Child is reaped by wait() or by a wait_for() that returns its Exit; kill() after that
//    signals nothing (never a reused pid), except a still-existing process group of its own.
//  - ~Child of a child still running: kills it with SIGKILL (its group, with own_process_group)
//    and reaps it, like a std::jthread joins: no child outlives its Child unnoticed, and none is
//    left a zombie. Stop it gracefully first (kill(SIGTERM), wait_for) when that matters.
//  - run(s): spawn(s), then wait(); for short commands.
//  - find_os_user() resolves a user (uid, gid, home, supplementary groups) for Spawn::user.
//  - append_line() writes `line` with one write() on an O_APPEND descriptor, then fsyncs.
// Failed system calls throw std::system_error; nothing else is thrown but std::bad_alloc and
// std::logic_error (an empty argv, a wait on a moved-from Child).
//
// Thread-safety: spawn(), run(), find_os_user() and append_line() are thread-safe. A Child is one
// thread's at a time (any thread's: it is movable), like any object without locks.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace runledger::subprocess {

// The identity a child runs as.
struct OsUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::filesystem::path home;
  std::vector<gid_t> groups;  // supplementary groups
};

// `name`'s entry in the user database, with its supplementary groups; nullopt when there is none.
std::optional<OsUser> find_os_user(std::string_view name);

// Where the child's stdout and stderr go (both to the same place).
enum class Output {
  inherit,  // our own stdout and stderr
  capture,  // a pipe read into Child::output()
  file,     // Spawn::output_file, created (0644) or truncated
  discard,  // /dev/null
};

// Sets a variable (a value) or removes it (nullopt) in the child's environment.
using EnvOverride = std::pair<std::string, std::optional<std::string>>;

struct Spawn {
  explicit Spawn(std::vector<std::string> argv) : argv(std::move(argv)) {}

  std::vector<std::string> argv;
  std::string program;  // the file executed; empty: argv[0]
  std::vector<EnvOverride> env;
  std::filesystem::path cwd;  // empty: ours
  std::optional<OsUser> user;
  Output output = Output::inherit;
  std::filesystem::path output_file;     // Output::file
  std::size_t capture_limit = 1u << 20;  // Output::capture: bytes kept
  int death_signal = 0;                  // 0: none
  bool own_process_group = false;
};

// How a child ended.
struct Exit {
  int code = 0;    // its exit status; 0 when a signal ended it
  int signal = 0;  // the signal that ended it; 0 when it exited
  bool success() const { return signal == 0 && code == 0; }
  // As a shell's $? shows it: the code, or 128 + the signal.
  int shell_status() const { return signal != 0 ? 128 + signal : code; }
  // "exit 3" or "signal 9".
  std::string to_string() const;
};

class Child {
 public:
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;  // first ends the child this held, as ~Child does
  ~Child();

  pid_t pid() const { return pid_; }
  // Blocks until the child has exited (reading its captured output meanwhile).
  Exit wait();
  // The same for at most `timeout`; nullopt if it is still running then.
  std::optional<Exit> wait_for(std::chrono::milliseconds timeout);
  // Sends `signal` to the child (its group, with own_process_group) unless it has been reaped.
  void kill(int signal);
  // What has been captured so far; all of it once wait() or wait_for() returned an Exit.
  const std::string& output() const { return output_; }
  bool truncated() const { return truncated_; }

 private:
  friend Child spawn(const Spawn& spawn);
  Child(pid_t pid, int pidfd, int output_fd, std::size_t capture_limit, bool own_process_group);
  void read_output(bool drain);
  void reap();
  void end();

  pid_t pid_ = -1;
  int pidfd_ = -1;      // -1: the kernel has no pidfd_open, waits poll waitpid instead
  int output_fd_ = -1;  // the capture pipe's read end until it is drained
  std::size_t capture_limit_ = 0;
  bool own_process_group_ = false;
  std::optional<Exit> exit_;
  std::string output_;
  bool truncated_ = false;
};

Child spawn(const Spawn& spawn);

struct Completed {
  Exit exit;
  std::string output;  // with Output::capture
  bool truncated = false;
};

Completed run(const Spawn& spawn);

void append_line(const std::filesystem::path& file, const std::string& line);

// The interface before spawn(), kept while cli/demo_command.cc calls it: argv searched on PATH,
// cwd `dir`, `extra_env` set, output captured up to `max_output` bytes.
struct ChildResult {
  bool exited;         // false: killed by a signal
  int code;            // exit status, or the signal number
  std::string output;  // stdout and stderr merged, at most max_output bytes
  bool truncated;      // output past max_output was dropped
};
ChildResult run_child(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::string>>& extra_env,
                      const std::filesystem::path& dir, std::size_t max_output);

}  // namespace runledger::subprocess
