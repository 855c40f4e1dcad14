// Operator actions (pause, resume, terminate, restart from a step), each in the history with who
// did it, and instances pinned to the workflow version they started on.
#include <atomic>
#include <thread>

#include "errors/errors.h"
#include "failpoint/failpoint.h"
#include "tests/coordinator/coordinator_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;
using coordinator::EventWait;
using coordinator::InstanceStatus;

namespace {

bool history_has(CoordinatorFixture& f, const std::string& id, const std::string& what,
                 const std::string& by) {
  for (const auto& h : f.client().history(InstanceId(id))) {
    if (h.what == what && h.detail.value("by", "") == by) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a paused instance does not run until resumed, and both are in the history") {
  CoordinatorFixture f;
  f.add("waiter", [](const json&, coordinator::Step& step) {
    return step.wait_for_event("go", EventWait{"go", json::object(), 600s});
  });
  f.create("waiter", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  f.client().pause(InstanceId("i-1"), "alice");
  CHECK(f.status("i-1") == InstanceStatus::paused);
  f.client().send_event(InstanceId("i-1"), "go", {{"ok", true}}, "g1");
  CHECK_FALSE(executor->run_one());  // paused: the event waits
  CHECK_THROWS_AS(f.client().pause(InstanceId("i-1"), "alice"), Conflict);
  f.client().resume(InstanceId("i-1"), "bob");
  REQUIRE(executor->run_one());
  CHECK(f.client().get(InstanceId("i-1")).output == json{{"ok", true}});
  CHECK(history_has(f, "i-1", "paused", "alice"));
  CHECK(history_has(f, "i-1", "resumed", "bob"));
  CHECK_THROWS_AS(f.client().resume(InstanceId("i-404"), "bob"), NotFound);
}

TEST_CASE("a terminated instance never runs again") {
  CoordinatorFixture f;
  f.add("sleeper", [](const json&, coordinator::Step& step) {
    step.sleep("nap", 1s);
    return json("woke");
  });
  f.create("sleeper", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  f.client().terminate(InstanceId("i-1"), "carol");
  f.db.advance_clock(2s);
  CHECK_FALSE(executor->run_one());
  CHECK(f.status("i-1") == InstanceStatus::terminated);
  CHECK_THROWS_AS(f.client().terminate(InstanceId("i-1"), "carol"), Conflict);
  CHECK(history_has(f, "i-1", "terminated", "carol"));
}

TEST_CASE("pausing a running instance fences out the executor replaying it") {
  CoordinatorFixture f;
  f.add("busy", [](const json&, coordinator::Step& step) {
    return step.run("work", [](std::stop_token) {
      failpoint::hit("test.inside_body");
      return json("done");
    });
  });
  f.create("busy", "i-1");
  auto executor = f.executor();
  failpoint::arm("test.inside_body", failpoint::Action::pause);
  std::thread replay([&] { executor->run_one(); });
  REQUIRE(failpoint::wait_until_paused("test.inside_body", 10s));
  f.client().pause(InstanceId("i-1"), "alice");
  failpoint::release("test.inside_body");
  replay.join();
  CHECK(f.status("i-1") == InstanceStatus::paused);
  CHECK(f.client().steps(InstanceId("i-1")).empty());  // its step write was refused
}

TEST_CASE("restart from a step re-runs it and every later step, reusing earlier ones") {
  CoordinatorFixture f;
  std::atomic<int> a{0}, b{0}, c{0};
  f.add("abc", [&](const json&, coordinator::Step& step) {
    step.run("a", [&](std::stop_token) { return json(++a); });
    step.run("b", [&](std::stop_token) { return json(++b); });
    const json last = step.run("c", [&](std::stop_token) { return json(++c); });
    return last;
  });
  f.create("abc", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  REQUIRE(f.status("i-1") == InstanceStatus::complete);
  CHECK(f.client().restart(InstanceId("i-1"), "b#1", "dave") == 2);
  CHECK(f.status("i-1") == InstanceStatus::queued);
  REQUIRE(executor->run_one());
  CHECK(f.client().get(InstanceId("i-1")).output == 2);
  CHECK(a == 1);
  CHECK(b == 2);
  CHECK(c == 2);
  CHECK(history_has(f, "i-1", "restarted", "dave"));
  CHECK_THROWS_AS(f.client().restart(InstanceId("i-1"), "zzz#1", "dave"), NotFound);
}

TEST_CASE("a spawn re-run by a restart starts a new child, not the old one") {
  CoordinatorFixture f;
  f.add("spawner", [](const json&, coordinator::Step& step) {
    ledger::DispatchRequest child;
    child.thread_key = "t/child";
    child.requester = "alice";
    return json(step.spawn("child", child).value());
  });
  f.create("spawner", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  const std::string first = f.client().get(InstanceId("i-1")).output;
  // The first child must end before another may take the same thread key.
  f.sql("UPDATE live_runs SET status = 'cancelled', finished_at = now()");
  f.client().restart(InstanceId("i-1"), "child#1", "erin");
  REQUIRE(executor->run_one());
  const std::string second = f.client().get(InstanceId("i-1")).output;
  CHECK(second != first);
  CHECK(f.sql("SELECT dispatch_key FROM live_runs WHERE run_id = '" + second + "'")[0][0]
            .as<std::string>() == "wf:i-1:child#1:r1");
}

TEST_CASE("an instance runs only on the version it started on") {
  CoordinatorFixture f;
  coordinator::Registration v1;
  v1.name = "versioned";
  v1.version = 1;
  v1.workflow =
      std::make_shared<LambdaWorkflow>([](const json&, coordinator::Step&) { return json("v1"); });
  f.registry.add(v1);
  f.create("versioned", "i-1");
  // An executor that only has version 2 leaves it alone.
  coordinator::Registry newer;
  coordinator::Registration v2 = v1;
  v2.version = 2;
  v2.workflow =
      std::make_shared<LambdaWorkflow>([](const json&, coordinator::Step&) { return json("v2"); });
  newer.add(v2);
  coordinator::Executor other(f.db.url(), newer, "executor-v2");
  CHECK_FALSE(other.run_one());
  CHECK(f.status("i-1") == InstanceStatus::queued);
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK(f.client().get(InstanceId("i-1")).output == "v1");
}

TEST_CASE("a sent event is in the history with who sent it, once per dedupe key") {
  CoordinatorFixture f;
  f.add("waiter", [](const json&, coordinator::Step& step) {
    return step.wait_for_event("go", EventWait{"go", json::object(), 600s});
  });
  f.create("waiter", "i-1");
  CHECK(f.client().send_event(InstanceId("i-1"), "go", {{"ok", true}}, "g1", "carol"));
  CHECK_FALSE(f.client().send_event(InstanceId("i-1"), "go", {{"ok", true}}, "g1", "carol"));
  CHECK(history_has(f, "i-1", "event sent", "carol"));
  int sent = 0;
  for (const auto& h : f.client().history(InstanceId("i-1"))) sent += h.what == "event sent";
  CHECK(sent == 1);
  CHECK_THROWS_AS(f.client().send_event(InstanceId("missing"), "go", json::object(), "g1", "carol"),
                  NotFound);
}
