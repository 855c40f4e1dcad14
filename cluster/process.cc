#include "cluster/process.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace runledger::cluster::detail {
namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// The environment for the child: ours, with HOME pointing at the user's home when switching
// user (tools look for dotfiles there, and root's home is not readable by postgres).
std::vector<std::string> child_environment(const std::optional<OsUser>& user) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (user && std::string_view(*entry).starts_with("HOME=")) continue;
    env.emplace_back(*entry);
  }
  if (user) env.push_back("HOME=" + user->home.string());
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Everything the child needs, prepared before fork(): between fork and exec only
// async-signal-safe calls are allowed (the owner process may be multi-threaded).
struct ChildPlan {
  std::vector<std::string> argv_storage;
  std::vector<std::string> env_storage;
  std::vector<char*> argv;
  std::vector<char*> env;
  std::string cwd;
  const OsUser* user = nullptr;
  std::string switch_failed;
  std::string chdir_failed;
  std::string exec_failed;
};

[[noreturn]] void report_and_exit(const std::string& message) {
  const int error = errno;
  const char* reason = strerrordesc_np(error);  // a static string: safe after fork
  if (reason == nullptr) reason = "unknown error";
  [[maybe_unused]] ssize_t ignored = write(STDERR_FILENO, message.data(), message.size());
  ignored = write(STDERR_FILENO, ": ", 2);
  ignored = write(STDERR_FILENO, reason, strlen(reason));
  ignored = write(STDERR_FILENO, "\n", 1);
  _exit(127);
}

[[noreturn]] void exec_child(const ChildPlan& plan, int stdin_fd, int output_fd) {
  if (dup2(stdin_fd, STDIN_FILENO) < 0 || dup2(output_fd, STDOUT_FILENO) < 0 ||
      dup2(output_fd, STDERR_FILENO) < 0) {
    _exit(127);
  }
  // No descriptor of the owner (its lock, its sockets) may leak into a daemonized postmaster.
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  if (plan.user != nullptr) {
    if (setgroups(plan.user->groups.size(), plan.user->groups.data()) != 0 ||
        setgid(plan.user->gid) != 0 || setuid(plan.user->uid) != 0) {
      report_and_exit(plan.switch_failed);
    }
  }
  if (chdir(plan.cwd.c_str()) != 0) report_and_exit(plan.chdir_failed);
  execve(plan.argv[0], plan.argv.data(), plan.env.data());
  report_and_exit(plan.exec_failed);
}

std::string read_all(int fd) {
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n > 0) {
      out.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0) {
      return out;
    } else if (errno != EINTR) {
      throw_errno("reading child output");
    }
  }
}

int wait_for(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw_errno("waitpid");
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

std::optional<OsUser> server_user() {
  if (geteuid() != 0) return std::nullopt;
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  const int error = getpwnam_r("postgres", &entry, buffer.data(), buffer.size(), &found);
  if (found == nullptr) {
    throw std::runtime_error(
        "running as root, but there is no `postgres` OS user to run PostgreSQL as" +
        (error != 0 ? std::string(" (") + strerror(error) + ")" : std::string()));
  }
  OsUser user{entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir, {}};
  int count = 64;
  user.groups.resize(static_cast<std::size_t>(count));
  while (getgrouplist(entry.pw_name, entry.pw_gid, user.groups.data(), &count) < 0) {
    user.groups.resize(static_cast<std::size_t>(count));
  }
  user.groups.resize(static_cast<std::size_t>(count));
  return user;
}

void give_to(const std::optional<OsUser>& user, const std::filesystem::path& path) {
  if (user && chown(path.c_str(), user->uid, user->gid) != 0) {
    throw_errno("chown " + path.string() + " to " + user->name);
  }
}

RunResult run(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
              const std::optional<OsUser>& user) {
  ChildPlan plan;
  plan.argv_storage = argv;
  plan.env_storage = child_environment(user);
  plan.argv = c_strings(plan.argv_storage);
  plan.env = c_strings(plan.env_storage);
  plan.cwd = cwd.string();
  plan.user = user ? &*user : nullptr;
  const std::string as_user = user ? " as OS user " + user->name : "";
  plan.switch_failed = "cannot switch to OS user " + (user ? user->name : std::string());
  plan.chdir_failed = "cannot enter " + plan.cwd + as_user;
  plan.exec_failed = "cannot execute " + argv.at(0) + as_user;

  const int stdin_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (stdin_fd < 0) throw_errno("open /dev/null");
  int output[2];
  if (pipe2(output, O_CLOEXEC) != 0) {
    close(stdin_fd);
    throw_errno("pipe");
  }
  const pid_t pid = fork();
  if (pid == 0) exec_child(plan, stdin_fd, output[1]);
  const int fork_errno = errno;
  close(stdin_fd);
  close(output[1]);
  if (pid < 0) {
    close(output[0]);
    errno = fork_errno;
    throw_errno("fork");
  }
  std::string text;
  try {
    text = read_all(output[0]);
  } catch (...) {
    close(output[0]);
    wait_for(pid);
    throw;
  }
  close(output[0]);
  return {wait_for(pid), std::move(text)};
}

std::string run_checked(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
                        const std::optional<OsUser>& user) {
  RunResult result = run(argv, cwd, user);
  if (result.exit_code != 0) {
    std::string command;
    for (const auto& arg : argv) command += (command.empty() ? "" : " ") + arg;
    throw std::runtime_error(command + " failed (exit code " + std::to_string(result.exit_code) +
                             "): " + result.output);
  }
  return std::move(result.output);
}

}  // namespace runledger::cluster::detail
