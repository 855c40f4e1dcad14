#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <future>
#include <string>

#include "errors/errors.h"
#include "failpoint/failpoint.h"

using namespace runledger;
using namespace std::chrono_literals;

namespace {

// Everything a child wrote to `fd` until it closed (or died).
std::string read_all(int fd) {
  std::string out;
  char buffer[256];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n > 0) {
      out.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      return out;
    }
  }
}

void say(int fd, const std::string& text) {
  // One unbuffered write: what was written before a SIGKILL is in the pipe.
  if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) _exit(3);
}

}  // namespace

TEST_CASE("an unarmed failpoint neither fires nor counts, even while others are armed") {
  failpoint::disarm_all();
  // Kill: a child with another point armed to kill (so every hit takes the slow path) hits
  // unarmed names, names that share a prefix with the armed one, and a disarmed one; it must
  // live to exit 0, and the armed point must not have counted their hits.
  const pid_t child = fork();
  if (child == 0) {
    setenv("RUNLEDGER_FAILPOINTS", "test.armed=kill", 1);
    failpoint::arm_from_environment();
    failpoint::arm("test.disarmed", failpoint::Action::kill);
    failpoint::disarm("test.disarmed");
    for (int i = 0; i < 100; ++i) {
      for (const char* name : {"test.unarmed", "test.arme", "test.armed.not", "test.disarmed"}) {
        failpoint::hit(name);
      }
    }
    _exit(failpoint::hits("test.armed") == 0 && failpoint::hits("test.unarmed") == 0 ? 0 : 4);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK_FALSE(WIFSIGNALED(status));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);

  // Pause: with another point armed to pause, hitting unarmed names holds no thread.
  failpoint::arm("test.held", failpoint::Action::pause);
  auto worker = std::async(std::launch::async, [] {
    for (int i = 0; i < 100; ++i) {
      failpoint::hit("test.unarmed");
      failpoint::hit("test.hel");
    }
  });
  CHECK(worker.wait_for(5s) == std::future_status::ready);
  CHECK(failpoint::paused_at("test.unarmed") == 0);
  CHECK(failpoint::paused_at("test.held") == 0);
  CHECK(failpoint::hits("test.held") == 0);
  CHECK(failpoint::hits("test.unarmed") == 0);
  failpoint::disarm_all();
  worker.wait();
}

TEST_CASE("a paused failpoint holds its thread until released") {
  failpoint::arm("test.pause", failpoint::Action::pause);
  auto worker = std::async(std::launch::async, [] {
    failpoint::hit("test.pause");
    return 7;
  });
  REQUIRE(failpoint::wait_until_paused("test.pause", 5s));
  CHECK(worker.wait_for(50ms) == std::future_status::timeout);
  failpoint::release("test.pause");
  CHECK(worker.get() == 7);
  failpoint::hit("test.pause");  // released means disarmed
}

TEST_CASE("a kill failpoint ends the process with SIGKILL on its nth hit") {
  // The child reports on a pipe before and after every hit; killed on the 3rd, the pipe holds
  // exactly the two hits that passed and the start of the third. An earlier kill leaves less,
  // a later one (or none) more.
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const pid_t child = fork();
  if (child == 0) {
    close(pipe_fds[0]);
    setenv("RUNLEDGER_FAILPOINTS", "test.kill=kill@3", 1);
    failpoint::arm_from_environment();
    for (int i = 1; i <= 10; ++i) {
      say(pipe_fds[1], "before " + std::to_string(i) + ";");
      failpoint::hit("test.kill");
      say(pipe_fds[1], "after " + std::to_string(i) + ";");
    }
    _exit(0);  // not reached
  }
  close(pipe_fds[1]);
  const std::string reported = read_all(pipe_fds[0]);
  close(pipe_fds[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(reported == "before 1;after 1;before 2;after 2;before 3;");
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

TEST_CASE("a pause armed from the environment holds the thread that hits it") {
  setenv("RUNLEDGER_FAILPOINTS", "test.env_pause=pause@2", 1);
  failpoint::arm_from_environment();
  unsetenv("RUNLEDGER_FAILPOINTS");
  failpoint::hit("test.env_pause");  // the first hit passes
  auto worker = std::async(std::launch::async, [] { failpoint::hit("test.env_pause"); });
  REQUIRE(failpoint::wait_until_paused("test.env_pause", 5s));
  CHECK(worker.wait_for(50ms) == std::future_status::timeout);
  failpoint::release("test.env_pause");
  worker.get();
}

TEST_CASE("a malformed failpoint spec is refused") {
  for (const char* spec :
       {"no-action", "x=stop", "x=kill@", "x=kill@0", "x=kill@2x", "x=pause@-1"}) {
    INFO(spec);
    setenv("RUNLEDGER_FAILPOINTS", spec, 1);
    CHECK_THROWS_AS(failpoint::arm_from_environment(), InvalidArgument);
  }
  unsetenv("RUNLEDGER_FAILPOINTS");
  failpoint::disarm_all();
}
