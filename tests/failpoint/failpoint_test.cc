#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <future>

#include "failpoint/failpoint.h"

using namespace runledger;
using namespace std::chrono_literals;

TEST_CASE("an unarmed failpoint does nothing") {
  failpoint::disarm_all();
  failpoint::hit("nothing.here");
  CHECK(failpoint::hits("nothing.here") == 0);
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
  const pid_t child = fork();
  if (child == 0) {
    setenv("RUNLEDGER_FAILPOINTS", "test.kill=kill@3", 1);
    failpoint::arm_from_environment();
    for (int i = 0; i < 2; ++i) failpoint::hit("test.kill");
    failpoint::hit("test.kill");
    _exit(0);  // not reached
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
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
  setenv("RUNLEDGER_FAILPOINTS", "no-action", 1);
  CHECK_THROWS_AS(failpoint::arm_from_environment(), std::invalid_argument);
  setenv("RUNLEDGER_FAILPOINTS", "x=stop", 1);
  CHECK_THROWS_AS(failpoint::arm_from_environment(), std::invalid_argument);
  unsetenv("RUNLEDGER_FAILPOINTS");
  failpoint::disarm_all();
}
