#include "subprocess/subprocess.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <system_error>

extern char** environ;

namespace runledger::subprocess {
namespace {

using SteadyClock = std::chrono::steady_clock;

[[noreturn]] void throw_errno(const std::string& what, int error = errno) {
  throw std::system_error(error, std::generic_category(), what);
}

// Closes a descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    reset();
    fd_ = other.release();
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// pidfd_open and pidfd_send_signal go through syscall(): glibc 2.36's <sys/pidfd.h> declares
// them without C linkage.

// A new descriptor numbered 3 or above: the child dup2()s onto 0, 1 and 2, which must not be
// the source of another dup2 (a process started with its stdio closed gets low numbers here).
Fd above_stdio(int fd, const char* what) {
  if (fd < 0) throw_errno(what);
  Fd owned(fd);
  if (fd > STDERR_FILENO) return owned;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  if (moved < 0) throw_errno(what);
  return Fd(moved);
}

std::vector<std::string> child_environment(const std::vector<EnvOverride>& overrides) {
  const auto name_of = [](std::string_view entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view name = name_of(*entry);
    const bool overridden = std::any_of(overrides.begin(), overrides.end(),
                                        [&](const EnvOverride& o) { return o.first == name; });
    if (!overridden) env.emplace_back(*entry);
  }
  for (const auto& [name, value] : overrides) {
    if (value) env.push_back(name + "=" + *value);
  }
  return env;
}

// `program` as execve() takes it: as given when it holds a '/', else the first executable file
// of that name on `env`'s PATH (execvpe's search, done before fork).
std::string resolve_program(const std::string& program, const std::vector<std::string>& env) {
  if (program.find('/') != std::string::npos) return program;
  std::string_view path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& entry : env) {
    if (std::string_view(entry).starts_with("PATH=")) path = std::string_view(entry).substr(5);
  }
  while (true) {
    const auto colon = path.find(':');
    const std::string_view dir = path.substr(0, colon);
    const std::string candidate =
        (dir.empty() ? std::string(".") : std::string(dir)) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  throw_errno("cannot find " + program + " on PATH", ENOENT);
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// What the child reports on its error pipe when it cannot reach exec.
enum class FailedStep : int { user, cwd, exec, stdio };
struct ChildFailure {
  FailedStep step;
  int error;
};

// Everything the child touches between fork and exec, prepared before fork.
struct ChildPlan {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = nullptr;  // nullptr: ours
  const OsUser* user = nullptr;
  int stdin_fd = -1;
  int output_fd = -1;  // -1: inherit
  int error_fd = -1;
  int death_signal = 0;
  pid_t parent = 0;
  bool own_process_group = false;
};

[[noreturn]] void fail(const ChildPlan& plan, FailedStep step) {
  const ChildFailure failure{step, errno};
  [[maybe_unused]] const ssize_t n = ::write(plan.error_fd, &failure, sizeof failure);
  ::_exit(127);
}

// Only async-signal-safe calls from here to exec: the parent may be multi-threaded.
[[noreturn]] void exec_child(const ChildPlan& plan) {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int signal = 1; signal < NSIG; ++signal) ::sigaction(signal, &default_action, nullptr);
  if (plan.own_process_group) ::setpgid(0, 0);
  if (::dup2(plan.stdin_fd, STDIN_FILENO) < 0) fail(plan, FailedStep::stdio);
  if (plan.output_fd >= 0 &&
      (::dup2(plan.output_fd, STDOUT_FILENO) < 0 || ::dup2(plan.output_fd, STDERR_FILENO) < 0)) {
    fail(plan, FailedStep::stdio);
  }
  // Every other descriptor closes at exec; the error pipe stays open until then.
  ::close_range(STDERR_FILENO + 1, ~0U, CLOSE_RANGE_CLOEXEC);
  if (plan.user != nullptr &&
      (::setgroups(plan.user->groups.size(), plan.user->groups.data()) != 0 ||
       ::setgid(plan.user->gid) != 0 || ::setuid(plan.user->uid) != 0)) {
    fail(plan, FailedStep::user);
  }
  // After the user switch, which clears the death signal.
  if (plan.death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, plan.death_signal);
    if (::getppid() != plan.parent) ::_exit(127);  // the parent died before prctl
  }
  if (plan.cwd != nullptr && ::chdir(plan.cwd) != 0) fail(plan, FailedStep::cwd);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(plan.path, plan.argv, plan.envp);
  fail(plan, FailedStep::exec);
}

std::string failure_message(const ChildFailure& failure, const Spawn& s, const std::string& path) {
  switch (failure.step) {
    case FailedStep::user:
      return "cannot switch to OS user " + s.user->name + " to run " + path;
    case FailedStep::cwd:
      return "cannot enter " + s.cwd.string() + " to run " + path;
    case FailedStep::stdio:
      return "cannot set up stdin, stdout and stderr for " + path;
    case FailedStep::exec:
      break;
  }
  return "cannot execute " + path;
}

// Blocks until the child has exec'd (EOF: the pipe closed on exec) or reported why not.
std::optional<ChildFailure> read_failure(int fd) {
  ChildFailure failure{};
  std::size_t got = 0;
  while (got < sizeof failure) {
    const ssize_t n = ::read(fd, reinterpret_cast<char*>(&failure) + got, sizeof failure - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got < sizeof failure) return std::nullopt;
  return failure;
}

Exit exit_of(int status) {
  if (WIFSIGNALED(status)) return Exit{0, WTERMSIG(status)};
  return Exit{WEXITSTATUS(status), 0};
}

int waitpid_retrying(pid_t pid, int options) {
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, options);
    if (r == pid) return status;
    if (r == 0) return -1;  // WNOHANG: still running
    if (errno != EINTR) throw_errno("waitpid");
  }
}

}  // namespace

std::string Exit::to_string() const {
  return signal != 0 ? "signal " + std::to_string(signal) : "exit " + std::to_string(code);
}

std::optional<OsUser> find_os_user(std::string_view name) {
  const std::string key(name);
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  int error;
  while ((error = ::getpwnam_r(key.c_str(), &entry, buffer.data(), buffer.size(), &found)) ==
         ERANGE) {
    buffer.resize(buffer.size() * 2);
  }
  if (found == nullptr) {
    // ENOENT and friends are how some NSS backends say "no such user".
    if (error == 0 || error == ENOENT || error == ESRCH || error == EBADF || error == EPERM) {
      return std::nullopt;
    }
    throw_errno("looking up OS user " + key, error);
  }
  OsUser user{entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir, {}};
  int count = 64;
  user.groups.resize(static_cast<std::size_t>(count));
  while (::getgrouplist(entry.pw_name, entry.pw_gid, user.groups.data(), &count) < 0) {
    user.groups.resize(static_cast<std::size_t>(count));
  }
  user.groups.resize(static_cast<std::size_t>(count));
  return user;
}

Child spawn(const Spawn& s) {
  if (s.argv.empty()) throw std::invalid_argument("spawn: empty argv");
  std::vector<std::string> env = child_environment(s.env);
  std::string path = resolve_program(s.program.empty() ? s.argv[0] : s.program, env);
  std::vector<std::string> argv_storage = s.argv;
  const std::vector<char*> argv = c_strings(argv_storage);
  const std::vector<char*> envp = c_strings(env);
  const std::string cwd = s.cwd.string();

  Fd stdin_fd = above_stdio(::open("/dev/null", O_RDONLY | O_CLOEXEC), "open /dev/null");
  Fd output_read;
  Fd output_write;
  switch (s.output) {
    case Output::inherit:
      break;
    case Output::capture: {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw_errno("pipe2");
      output_read = Fd(fds[0]);
      output_write = above_stdio(fds[1], "pipe2");
      // The child's end blocks: a child must not see EAGAIN on its stdout.
      if (::fcntl(output_write.get(), F_SETFL, 0) != 0) throw_errno("fcntl");
      break;
    }
    case Output::file:
      output_write =
          above_stdio(::open(s.output_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644),
                      ("open " + s.output_file.string()).c_str());
      break;
    case Output::discard:
      output_write = above_stdio(::open("/dev/null", O_WRONLY | O_CLOEXEC), "open /dev/null");
      break;
  }
  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) throw_errno("pipe2");
  Fd error_read(error_pipe[0]);
  Fd error_write(error_pipe[1]);

  ChildPlan plan;
  plan.path = path.c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.cwd = cwd.empty() ? nullptr : cwd.c_str();
  plan.user = s.user ? &*s.user : nullptr;
  plan.stdin_fd = stdin_fd.get();
  plan.output_fd = output_write.get();
  plan.error_fd = error_write.get();
  plan.death_signal = s.death_signal;
  plan.parent = ::getpid();
  plan.own_process_group = s.own_process_group;

  sigset_t all, original;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &original);
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(plan);
  const int fork_error = errno;
  ::pthread_sigmask(SIG_SETMASK, &original, nullptr);
  if (pid < 0) throw_errno("fork", fork_error);
  // Also here, so that kill() of the group cannot come before the child's own setpgid.
  if (s.own_process_group) ::setpgid(pid, pid);
  error_write.reset();
  stdin_fd.reset();
  output_write.reset();
  if (const auto failure = read_failure(error_read.get())) {
    waitpid_retrying(pid, 0);
    throw_errno(failure_message(*failure, s, path), failure->error);
  }
  // The child is not reaped yet, so its pid cannot have been reused.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  return Child(pid, pidfd, output_read.release(), s.capture_limit, s.own_process_group);
}

Child::Child(pid_t pid, int pidfd, int output_fd, std::size_t capture_limit, bool own_process_group)
    : pid_(pid),
      pidfd_(pidfd),
      output_fd_(output_fd),
      capture_limit_(capture_limit),
      own_process_group_(own_process_group) {}

Child::Child(Child&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::exchange(other.pidfd_, -1)),
      output_fd_(std::exchange(other.output_fd_, -1)),
      capture_limit_(other.capture_limit_),
      own_process_group_(other.own_process_group_),
      exit_(std::exchange(other.exit_, std::nullopt)),
      output_(std::move(other.output_)),
      truncated_(other.truncated_) {}

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    end();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::exchange(other.pidfd_, -1);
    output_fd_ = std::exchange(other.output_fd_, -1);
    capture_limit_ = other.capture_limit_;
    own_process_group_ = other.own_process_group_;
    exit_ = std::exchange(other.exit_, std::nullopt);
    output_ = std::move(other.output_);
    truncated_ = other.truncated_;
  }
  return *this;
}

Child::~Child() {
  end();
}

void Child::end() {
  if (pid_ > 0 && !exit_) {
    try {
      kill(SIGKILL);
      wait();
    } catch (...) {  // nothing better to do in a destructor: the kernel reaps it with us
    }
  }
  if (pidfd_ >= 0) ::close(pidfd_);
  if (output_fd_ >= 0) ::close(output_fd_);
  pidfd_ = -1;
  output_fd_ = -1;
}

Exit Child::wait() {
  for (;;) {
    if (auto exit = wait_for(std::chrono::hours(24))) return *exit;
  }
}

std::optional<Exit> Child::wait_for(std::chrono::milliseconds timeout) {
  if (exit_) return exit_;
  if (pid_ <= 0) throw std::logic_error("Child::wait_for on a moved-from Child");
  const auto deadline = SteadyClock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
    // Without a pidfd, waitpid is polled every 10 ms.
    int poll_ms = static_cast<int>(std::max<std::int64_t>(0, left.count()));
    if (pidfd_ < 0) poll_ms = std::min(poll_ms, 10);
    pollfd fds[2];
    nfds_t count = 0;
    if (pidfd_ >= 0) fds[count++] = {pidfd_, POLLIN, 0};
    if (output_fd_ >= 0) fds[count++] = {output_fd_, POLLIN, 0};
    const int ready = ::poll(fds, count, poll_ms);
    if (ready < 0 && errno != EINTR) throw_errno("poll");
    if (output_fd_ >= 0) read_output(false);
    if (pidfd_ < 0 || (ready > 0 && (fds[0].revents & POLLIN) != 0)) {
      const int status = waitpid_retrying(pid_, pidfd_ < 0 ? WNOHANG : 0);
      if (status != -1) {
        exit_ = exit_of(status);
        // What the child wrote before it exited is in the pipe now; a grandchild's later
        // writes are not waited for.
        if (output_fd_ >= 0) read_output(true);
        return exit_;
      }
    }
    if (SteadyClock::now() >= deadline) return std::nullopt;
  }
}

// Reads what the pipe holds now (non-blocking); `drain`: then closes it.
void Child::read_output(bool drain) {
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(output_fd_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) throw_errno("reading the child's output");
    if (n <= 0) {
      if (n == 0 || drain) {  // every writer closed, or the child is gone
        ::close(output_fd_);
        output_fd_ = -1;
      }
      return;
    }
    const std::size_t room = capture_limit_ - std::min(capture_limit_, output_.size());
    const std::size_t take = std::min(room, static_cast<std::size_t>(n));
    output_.append(buffer, take);
    if (take < static_cast<std::size_t>(n)) truncated_ = true;
  }
}

void Child::kill(int signal) {
  if (pid_ <= 0) return;
  int result = 0;
  if (own_process_group_) {
    result = ::kill(-pid_, signal);
  } else if (exit_) {
    return;
  } else if (pidfd_ >= 0) {
    result = static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd_, signal, nullptr, 0));
  } else {
    result = ::kill(pid_, signal);
  }
  if (result != 0 && errno != ESRCH) throw_errno("kill " + std::to_string(pid_));
}

Completed run(const Spawn& s) {
  Child child = spawn(s);
  const Exit exit = child.wait();
  return {exit, child.output(), child.truncated()};
}

ChildResult run_child(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::string>>& extra_env,
                      const std::filesystem::path& dir, std::size_t max_output) {
  Spawn s(argv);
  s.cwd = dir;
  s.output = Output::capture;
  s.capture_limit = max_output;
  for (const auto& [name, value] : extra_env) s.env.emplace_back(name, value);
  Completed done = run(s);
  return {done.exit.signal == 0, done.exit.signal != 0 ? done.exit.signal : done.exit.code,
          std::move(done.output), done.truncated};
}

void append_line(const std::filesystem::path& file, const std::string& line) {
  Fd fd(::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw_errno("open " + file.string());
  ssize_t n;
  do {
    n = ::write(fd.get(), line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) throw_errno("write " + file.string());
  if (static_cast<std::size_t>(n) != line.size()) {
    throw std::system_error(EIO, std::generic_category(), "short write to " + file.string());
  }
  if (::fsync(fd.get()) != 0) throw_errno("fsync " + file.string());
}

}  // namespace runledger::subprocess
