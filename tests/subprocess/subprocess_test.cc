// Child processes (subprocess/subprocess.h): captured output and its cap, exit codes against
// signals, timed waits and kills, the clean start (signals, environment, cwd, descriptors), the
// death signal across a real intermediate process, process groups, another OS user, and the
// destructor's kill.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>

#include <catch2/catch.hpp>

#include "subprocess/subprocess.h"

namespace {

namespace fs = std::filesystem;
using namespace runledger::subprocess;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

Spawn shell(const std::string& script) {
  Spawn s({"/bin/sh", "-c", script});
  s.output = Output::capture;
  return s;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "runledger-subprocess-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = fs::canonical(pattern);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// A line of /proc/<pid>/status, e.g. "SigBlk" -> "0000000000000000".
std::string proc_status(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(field + ":")) {
      const auto value = line.find_first_not_of(" \t", field.size() + 1);
      return line.substr(value);
    }
  }
  return "";
}

// Becomes the reaper of orphaned descendants, so that a grandchild's end is observable here.
void adopt_orphans() {
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
}

// The wait status of `pid` (a child, or an adopted orphan) once it ends within `limit`.
std::optional<int> reap_within(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = SteadyClock::now() + limit;
  while (SteadyClock::now() < deadline) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0 && errno != EINTR) return std::nullopt;
    std::this_thread::sleep_for(10ms);
  }
  return std::nullopt;
}

// The first line of the child's captured output, waited for at most 10 s.
std::string first_line(Child& child) {
  const auto deadline = SteadyClock::now() + 10s;
  while (child.output().find('\n') == std::string::npos && SteadyClock::now() < deadline) {
    child.wait_for(10ms);
  }
  return child.output().substr(0, child.output().find('\n'));
}

}  // namespace

TEST_CASE("a captured command's stdout and stderr arrive in one output, with its exit code") {
  const Completed done = run(shell("echo out; echo err >&2; exit 3"));
  CHECK(done.output == "out\nerr\n");
  CHECK_FALSE(done.truncated);
  CHECK(done.exit.code == 3);
  CHECK(done.exit.signal == 0);
  CHECK_FALSE(done.exit.success());
  CHECK(done.exit.to_string() == "exit 3");
  CHECK(run(shell("true")).exit.success());
}

TEST_CASE("capture keeps the first capture_limit bytes, drains the rest, and says it truncated") {
  // 200 kB is more than a pipe holds: the child finishes only if the rest is read.
  Spawn big = shell("head -c 200000 /dev/zero; echo done >&2");
  big.capture_limit = 1000;
  const Completed truncated = run(big);
  CHECK(truncated.exit.success());
  CHECK(truncated.output == std::string(1000, '\0'));
  CHECK(truncated.truncated);

  Spawn exact = shell("printf 12345");
  exact.capture_limit = 5;
  const Completed whole = run(exact);
  CHECK(whole.output == "12345");
  CHECK_FALSE(whole.truncated);
}

TEST_CASE("a child ended by a signal reports the signal, not an exit code") {
  const Completed killed = run(shell("kill -9 $$"));
  CHECK(killed.exit.signal == SIGKILL);
  CHECK(killed.exit.code == 0);
  CHECK(killed.exit.shell_status() == 128 + SIGKILL);
  CHECK(killed.exit.to_string() == "signal 9");
  CHECK(run(shell("exit 7")).exit.shell_status() == 7);
}

TEST_CASE("wait_for returns nothing while the child runs, and kill then ends it") {
  Child child = spawn(Spawn({"sleep", "30"}));
  const auto before = SteadyClock::now();
  CHECK_FALSE(child.wait_for(200ms).has_value());
  CHECK(SteadyClock::now() - before >= 200ms);
  child.kill(SIGTERM);
  const auto exit = child.wait_for(10s);
  REQUIRE(exit.has_value());
  CHECK(exit->signal == SIGTERM);
  CHECK(SteadyClock::now() - before < 10s);
  child.kill(SIGKILL);  // reaped: signals nothing, throws nothing
  CHECK(child.wait().signal == SIGTERM);
}

TEST_CASE("a child starts with no signal blocked or ignored, whatever the spawning thread had") {
  struct sigaction ignore {
  }, original{};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(::sigaction(SIGPIPE, &ignore, &original) == 0);
  std::optional<Child> child;
  std::thread spawner([&] {
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &term, nullptr);
    child.emplace(spawn(Spawn({"sleep", "30"})));
  });
  spawner.join();
  ::sigaction(SIGPIPE, &original, nullptr);
  REQUIRE(child.has_value());
  CHECK(proc_status(child->pid(), "SigBlk") == "0000000000000000");
  CHECK(proc_status(child->pid(), "SigIgn") == "0000000000000000");
  child->kill(SIGTERM);
  CHECK(child->wait().signal == SIGTERM);
}

TEST_CASE("the death signal ends a child when the process that spawned it dies") {
  adopt_orphans();
  for (const int death_signal : {SIGTERM, 0}) {
    INFO("death_signal " << death_signal);
    int report[2];
    REQUIRE(::pipe(report) == 0);
    // The intermediate: a real process that spawns the child, reports its pid and waits to be
    // killed. No Catch2 in it: assertions belong to this process.
    const pid_t intermediate = ::fork();
    REQUIRE(intermediate >= 0);
    if (intermediate == 0) {
      try {
        Spawn s({"sleep", "30"});
        s.death_signal = death_signal;
        Child child = spawn(s);
        const pid_t pid = child.pid();
        if (::write(report[1], &pid, sizeof pid) != sizeof pid) ::_exit(1);
        for (;;) ::pause();
      } catch (...) {
        ::_exit(1);
      }
    }
    ::close(report[1]);
    pid_t grandchild = -1;
    REQUIRE(::read(report[0], &grandchild, sizeof grandchild) == sizeof grandchild);
    ::close(report[0]);
    ::kill(intermediate, SIGKILL);
    REQUIRE(reap_within(intermediate, 10s).has_value());

    const auto status = reap_within(grandchild, death_signal != 0 ? 10s : 1s);
    if (death_signal != 0) {
      REQUIRE(status.has_value());
      CHECK(WIFSIGNALED(*status));
      CHECK(WTERMSIG(*status) == death_signal);
    } else {
      CHECK_FALSE(status.has_value());  // without one, the orphan lives on
      ::kill(grandchild, SIGKILL);
      CHECK(reap_within(grandchild, 10s).has_value());
    }
  }
}

TEST_CASE("env overrides set and unset variables, and cwd is the child's working directory") {
  TempDir dir;
  ::setenv("RUNLEDGER_SUBPROCESS_TEST_KEPT", "kept", 1);
  ::setenv("RUNLEDGER_SUBPROCESS_TEST_UNSET", "inherited", 1);
  ::setenv("RUNLEDGER_SUBPROCESS_TEST_SET", "inherited", 1);
  Spawn s = shell(
      "printf '%s|%s|%s|' \"$RUNLEDGER_SUBPROCESS_TEST_KEPT\" "
      "\"${RUNLEDGER_SUBPROCESS_TEST_UNSET-unset}\" \"$RUNLEDGER_SUBPROCESS_TEST_SET\"; pwd");
  s.env = {{"RUNLEDGER_SUBPROCESS_TEST_UNSET", std::nullopt},
           {"RUNLEDGER_SUBPROCESS_TEST_SET", "overridden"}};
  s.cwd = dir.path;
  CHECK(run(s).output == "kept|unset|overridden|" + dir.path.string() + "\n");
}

TEST_CASE("program names the file executed, and argv[0] is what the child sees") {
  Spawn s({"custom-name", "-c", "echo $0"});
  s.program = "/bin/sh";
  s.output = Output::capture;
  const Completed done = run(s);
  CHECK(done.output == "custom-name\n");
}

TEST_CASE("a background grandchild holding the pipe does not hold up the capture") {
  const auto before = SteadyClock::now();
  const Completed done = run(shell("echo started; sleep 30 & echo $!"));
  CHECK(SteadyClock::now() - before < 10s);
  REQUIRE(done.exit.success());
  std::istringstream lines(done.output);
  std::string started, grandchild;
  std::getline(lines, started);
  std::getline(lines, grandchild);
  CHECK(started == "started");
  REQUIRE_FALSE(grandchild.empty());
  ::kill(std::stoi(grandchild), SIGKILL);
  reap_within(std::stoi(grandchild), 1s);  // ours only when an earlier test adopted orphans
}

TEST_CASE("the child gets no descriptor of ours but stdin, stdout and stderr") {
  TempDir dir;
  const int ours = ::open(dir.path.c_str(), O_RDONLY | O_DIRECTORY);  // deliberately inheritable
  REQUIRE(ours > STDERR_FILENO);
  const Completed done = run(shell("ls /proc/self/fd"));
  ::close(ours);
  // 0, 1, 2, and the descriptor ls opened to list the directory.
  CHECK(done.output == "0\n1\n2\n3\n");
}

TEST_CASE("Output::file sends stdout and stderr to a fresh file") {
  TempDir dir;
  const fs::path log = dir.path / "child.log";
  std::ofstream(log) << "left over from before\n";
  Spawn s = shell("echo out; echo err >&2");
  s.output = Output::file;
  s.output_file = log;
  const Completed done = run(s);
  CHECK(done.exit.success());
  CHECK(done.output.empty());
  std::ifstream in(log);
  std::ostringstream text;
  text << in.rdbuf();
  CHECK(text.str() == "out\nerr\n");
}

TEST_CASE("a program that cannot be started throws naming the step, and leaves no child") {
  TempDir dir;
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {  // what earlier tests in this process left
  }
  try {
    spawn(Spawn({"runledger-no-such-program"}));
    FAIL("spawned a missing program");
  } catch (const std::system_error& e) {
    CHECK(e.code().value() == ENOENT);
    CHECK(std::string(e.what()).find("cannot find runledger-no-such-program on PATH") !=
          std::string::npos);
  }
  try {
    spawn(Spawn({(dir.path / "missing").string()}));
    FAIL("spawned a missing file");
  } catch (const std::system_error& e) {
    CHECK(e.code().value() == ENOENT);
    CHECK(std::string(e.what()).find("cannot execute") != std::string::npos);
  }
  try {
    Spawn s({"/bin/true"});
    s.cwd = dir.path / "missing";
    spawn(s);
    FAIL("spawned into a missing directory");
  } catch (const std::system_error& e) {
    CHECK(e.code().value() == ENOENT);
    CHECK(std::string(e.what()).find("cannot enter") != std::string::npos);
  }
  CHECK_THROWS_AS(spawn(Spawn({})), std::invalid_argument);
  errno = 0;
  CHECK(::waitpid(-1, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
}

TEST_CASE("a Child destroyed while its child runs kills and reaps it") {
  pid_t pid = -1;
  const auto before = SteadyClock::now();
  {
    Child child = spawn(Spawn({"sleep", "30"}));
    pid = child.pid();
    Child moved = std::move(child);  // the moved-from one owns nothing
    CHECK(moved.pid() == pid);
    CHECK(child.pid() == -1);
  }
  CHECK(SteadyClock::now() - before < 10s);
  errno = 0;
  CHECK(::waitpid(pid, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);  // reaped already
}

TEST_CASE("with own_process_group, kill reaches the child's own children") {
  adopt_orphans();
  Spawn s = shell("sleep 30 & echo $!; wait");
  s.own_process_group = true;
  Child child = spawn(s);
  CHECK(::getpgid(child.pid()) == child.pid());
  const std::string grandchild = first_line(child);
  REQUIRE_FALSE(grandchild.empty());
  child.kill(SIGTERM);
  CHECK(child.wait().signal == SIGTERM);
  const auto status = reap_within(std::stoi(grandchild), 10s);
  REQUIRE(status.has_value());
  CHECK(WTERMSIG(*status) == SIGTERM);
}

TEST_CASE("a child runs as another OS user, with that user's groups") {
  CHECK_FALSE(find_os_user("runledger-no-such-user").has_value());
  if (::geteuid() != 0) {
    WARN("not root: the user switch is not tested");
    return;
  }
  const auto nobody = find_os_user("nobody");
  REQUIRE(nobody.has_value());
  Spawn s = shell("id -u; id -g; id -G");
  s.user = nobody;
  s.cwd = "/";
  const Completed done = run(s);
  REQUIRE(done.exit.success());
  std::string groups;
  for (const gid_t g : nobody->groups) groups += (groups.empty() ? "" : " ") + std::to_string(g);
  CHECK(done.output ==
        std::to_string(nobody->uid) + "\n" + std::to_string(nobody->gid) + "\n" + groups + "\n");
}
