#include "subprocess/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

extern char** environ;

namespace runledger::subprocess {
namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// Closes a descriptor on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// Only async-signal-safe calls from here to exec: the parent may be multi-threaded.
[[noreturn]] void exec_child(int out_fd, int null_fd, const char* dir, char* const argv[],
                             char* const envp[]) {
  if (::dup2(null_fd, STDIN_FILENO) < 0 || ::dup2(out_fd, STDOUT_FILENO) < 0 ||
      ::dup2(out_fd, STDERR_FILENO) < 0) {
    ::_exit(126);
  }
  ::close_range(3, ~0U, 0);  // best effort: a leaked descriptor is harmless to the result
  if (::chdir(dir) != 0) {
    static const char msg[] = "runledger: cannot enter the sandbox directory\n";
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(126);
  }
  ::execvpe(argv[0], argv, envp);
  static const char msg[] = "runledger: cannot execute the command\n";
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  ::_exit(errno == ENOENT ? 127 : 126);
}

}  // namespace

ChildResult run_child(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::string>>& extra_env,
                      const std::filesystem::path& dir, std::size_t max_output) {
  // Everything the child needs is built before fork.
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool replaced = false;
    for (const auto& [name, value] : extra_env) {
      if (entry.size() > name.size() && entry.substr(0, name.size()) == name &&
          entry[name.size()] == '=') {
        replaced = true;
      }
    }
    if (!replaced) env_strings.emplace_back(entry);
  }
  for (const auto& [name, value] : extra_env) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings(argv);
  std::vector<char*> argvp;
  for (auto& s : argv_strings) argvp.push_back(s.data());
  argvp.push_back(nullptr);
  const std::string dir_string = dir.string();

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  Fd read_end(fds[0]);
  Fd write_end(fds[1]);
  Fd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null_fd.get() < 0) throw_errno("open /dev/null");

  const pid_t pid = ::fork();
  if (pid < 0) throw_errno("fork");
  if (pid == 0) {
    exec_child(write_end.get(), null_fd.get(), dir_string.c_str(), argvp.data(), envp.data());
  }
  write_end.reset();
  null_fd.reset();

  ChildResult result{false, 0, {}, false};
  int status = 0;
  bool reaped = false;
  char buffer[65536];
  for (;;) {
    if (!reaped) {
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid) {
        reaped = true;
      } else if (r < 0 && errno != EINTR) {
        throw_errno("waitpid");
      }
    }
    pollfd p{read_end.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, reaped ? 0 : 100);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw_errno("poll");
    }
    if (ready == 0) {
      if (reaped) break;  // exited, and nothing more is waiting: a lingering grandchild is ignored
      continue;
    }
    const ssize_t n = ::read(read_end.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw_errno("read");
    }
    if (n == 0) {  // every writer closed
      if (reaped) break;
      while (::waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) throw_errno("waitpid");
      }
      reaped = true;
      break;
    }
    const std::size_t room = max_output - result.output.size();
    const std::size_t take = std::min(room, static_cast<std::size_t>(n));
    result.output.append(buffer, take);
    if (take < static_cast<std::size_t>(n)) result.truncated = true;
  }
  if (WIFEXITED(status)) {
    result.exited = true;
    result.code = WEXITSTATUS(status);
  } else {
    result.exited = false;
    result.code = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  return result;
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
