// Sleeps, event waits, child runs and the instance deadline (invariant 10).
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

TEST_CASE("a sleep stores its wake time: after a restart only the remainder is waited") {
  CoordinatorFixture f;
  f.add("sleeper", [&](const json&, coordinator::Step& step) {
    step.sleep("nap", 10s);
    return json("awake");
  });
  f.create("sleeper", "i-1");
  {
    auto first = f.executor();
    REQUIRE(first->run_one());
  }  // the executor goes away: a new one must not start the 10 s over
  f.db.advance_clock(6s);
  auto second = f.executor({}, "executor-2");
  CHECK_FALSE(second->run_one());
  f.db.advance_clock(4100ms);
  REQUIRE(second->run_one());
  CHECK(f.client().get(InstanceId("i-1")).output == "awake");
}

TEST_CASE("sleep_until waits for an absolute time on the database clock") {
  CoordinatorFixture f;
  const auto now_ms =
      f.sql("SELECT (extract(epoch FROM runledger_now()) * 1000)::bigint")[0][0].as<std::int64_t>();
  f.add("until", [&](const json&, coordinator::Step& step) {
    step.sleep_until("then", now_ms + 5000);
    return json("then");
  });
  f.create("until", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK(f.status("i-1") == InstanceStatus::waiting);
  f.db.advance_clock(5100ms);
  REQUIRE(executor->run_one());
  CHECK(f.status("i-1") == InstanceStatus::complete);
}

TEST_CASE("events sent before the wait are buffered and taken in order, each by one wait") {
  CoordinatorFixture f;
  f.add("collector", [&](const json&, coordinator::Step& step) {
    json got = json::array();
    for (int i = 0; i < 3; ++i) {
      got.push_back(step.wait_for_event("vote", EventWait{"vote", json::object(), 60s}));
    }
    return got;
  });
  f.create("collector", "i-1");
  CHECK(f.client().send_event(InstanceId("i-1"), "vote", {{"n", 1}}, "d1"));
  CHECK(f.client().send_event(InstanceId("i-1"), "vote", {{"n", 2}}, "d2"));
  CHECK_FALSE(
      f.client().send_event(InstanceId("i-1"), "vote", {{"n", 99}}, "d2"));  // same dedupe key
  auto executor = f.executor();
  REQUIRE(executor->run_one());  // takes 1 and 2, waits for the third
  CHECK(f.status("i-1") == InstanceStatus::waiting);
  CHECK(f.client().send_event(InstanceId("i-1"), "vote", {{"n", 3}}, "d3"));
  REQUIRE(executor->run_one());
  const auto i = f.client().get(InstanceId("i-1"));
  CHECK(i.status == InstanceStatus::complete);
  CHECK(i.output == json::array({{{"n", 1}}, {{"n", 2}}, {{"n", 3}}}));
  CHECK(f.sql("SELECT count(DISTINCT consumed_by) FROM wf_events WHERE instance_id = 'i-1'")[0][0]
            .as<int>() == 3);
  CHECK_THROWS_AS(f.client().send_event(InstanceId("nope"), "vote", json::object(), "d"), NotFound);
}

TEST_CASE("a wait takes only an event of its type whose payload contains its match") {
  CoordinatorFixture f;
  f.add("picky", [&](const json&, coordinator::Step& step) {
    return step.wait_for_event("mine", EventWait{"done", {{"run", "b"}}, 60s});
  });
  f.create("picky", "i-1");
  f.client().send_event(InstanceId("i-1"), "done", {{"run", "a"}, {"x", 1}}, "e1");
  f.client().send_event(InstanceId("i-1"), "other", {{"run", "b"}}, "e2");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK(f.status("i-1") == InstanceStatus::waiting);
  f.client().send_event(InstanceId("i-1"), "done", {{"run", "b"}, {"x", 2}}, "e3");
  REQUIRE(executor->run_one());
  CHECK(f.client().get(InstanceId("i-1")).output == json{{"run", "b"}, {"x", 2}});
  // The others stay buffered for a later wait.
  CHECK(f.sql("SELECT count(*) FROM wf_events WHERE consumed_by IS NULL")[0][0].as<int>() == 2);
}

TEST_CASE("a wait that times out says which wait, and the timeout is re-thrown on replay") {
  CoordinatorFixture f;
  std::atomic<int> catches{0};
  f.add("impatient", [&](const json&, coordinator::Step& step) {
    std::string message;
    try {
      step.wait_for_event("approval", EventWait{"approval", json::object(), 5s});
    } catch (const coordinator::EventTimeout& e) {
      ++catches;
      message = e.what();
    }
    step.sleep("after", 1s);
    return json(message);
  });
  f.create("impatient", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  f.db.advance_clock(5100ms);
  REQUIRE(executor->run_one());  // times out; sleeps
  f.client().send_event(InstanceId("i-1"), "approval", json::object(),
                        "late");  // too late for that wait
  f.db.advance_clock(1100ms);
  REQUIRE(executor->run_one());
  const auto i = f.client().get(InstanceId("i-1"));
  CHECK(i.status == InstanceStatus::complete);
  CHECK(i.output.get<std::string>().find("wait approval#1 for event 'approval'") !=
        std::string::npos);
  CHECK(catches == 2);  // thrown when it happened, re-thrown on the replay
  CHECK(f.sql("SELECT count(*) FROM wf_events WHERE consumed_by IS NULL")[0][0].as<int>() == 1);
}

TEST_CASE("a wait needs a timeout: nothing waits unbounded") {
  CoordinatorFixture f;
  f.add("forever", [&](const json&, coordinator::Step& step) {
    return step.wait_for_event("x", EventWait{"x", json::object(), 0ms});
  });
  f.create("forever", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK(f.status("i-1") == InstanceStatus::errored);
}

TEST_CASE(
    "an event sent while the instance is replaying wakes it instead of waiting out the timeout") {
  CoordinatorFixture f;
  f.add("listener", [&](const json&, coordinator::Step& step) {
    return step.wait_for_event("ping", EventWait{"ping", json::object(), 3600s});
  });
  f.create("listener", "i-1");
  auto executor = f.executor();
  // Paused right after the wait found no event and recorded itself, before the instance is
  // marked waiting: the event lands in between.
  failpoint::arm("coordinator.after_write", failpoint::Action::pause);
  std::thread replay([&] { executor->run_one(); });
  REQUIRE(failpoint::wait_until_paused("coordinator.after_write", 10s));
  f.client().send_event(InstanceId("i-1"), "ping", {{"n", 1}}, "p1");
  failpoint::release("coordinator.after_write");
  replay.join();
  CHECK(f.status("i-1") == InstanceStatus::waiting);
  REQUIRE(executor->run_one());  // due at once, not in an hour
  CHECK(f.client().get(InstanceId("i-1")).output == json{{"n", 1}});
}

TEST_CASE("spawn dispatches one child per step, and its end reaches the instance as an event") {
  CoordinatorFixture f;
  f.add("parent", [&](const json&, coordinator::Step& step) {
    ledger::DispatchRequest child;
    child.thread_key = "thread-1/child";
    child.requester = "alice";
    const RunId run = step.spawn("code", child);
    const json finished = step.wait_for_event(
        "child-done", EventWait{"run-finished", {{"run_id", run.value()}}, 600s});
    return json{{"child", run.value()}, {"status", finished["status"]}};
  });
  f.create("parent", "ship-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK(f.status("ship-1") == InstanceStatus::waiting);
  const auto children =
      f.sql("SELECT run_id::text, dispatch_key, parent_instance_id FROM live_runs");
  REQUIRE(children.size() == 1);
  CHECK(std::string(children[0][1].c_str()) == "wf:ship-1:code#1");
  CHECK(std::string(children[0][2].c_str()) == "ship-1");
  // The child runs somewhere and finishes: its terminal record announces it.
  const ledger::Owner bot{SlotName("bot-1"), IncarnationId(random_uuid())};
  const auto claim = f.ledger.claim_next(bot, 1);
  REQUIRE(claim.size() == 1);
  f.ledger.finish(claim[0].run.run_id, claim[0].run.generation, ledger::RunStatus::finished,
                  {{"ok", true}});
  REQUIRE(executor->run_one());
  const auto i = f.client().get(InstanceId("ship-1"));
  CHECK(i.status == InstanceStatus::complete);
  CHECK(i.output == json{{"child", children[0][0].c_str()}, {"status", "finished"}});
}

TEST_CASE("an instance past its maximum duration is errored, naming the step it was in") {
  CoordinatorFixture f;
  f.add(
      "slowpoke",
      [&](const json&, coordinator::Step& step) {
        step.run("first", [](std::stop_token) { return json(1); });
        step.sleep("long-nap", 3600s);
        return json("never");
      },
      std::chrono::seconds(60));
  f.create("slowpoke", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  // Waiting on a sleep of an hour, but woken at the deadline.
  f.db.advance_clock(61s);
  REQUIRE(executor->run_one());
  const auto i = f.client().get(InstanceId("i-1"));
  CHECK(i.status == InstanceStatus::errored);
  CHECK(i.error["kind"] == "deadline");
  CHECK(i.error["step"] == "long-nap#1");
}
