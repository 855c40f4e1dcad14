// Instances and executors: idempotent creation, leases and fencing between executors, history,
// and the run loop woken by NOTIFY.
#include <atomic>
#include <thread>

#include "errors/errors.h"
#include "failpoint/failpoint.h"
#include "tests/coordinator/coordinator_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;
using coordinator::InstanceStatus;

TEST_CASE("create is idempotent on the instance id and checks id and workflow") {
  CoordinatorFixture f;
  f.add("noop", [](const json& input, coordinator::Step&) { return input; });
  const auto first = f.client().create("noop", InstanceId("chat:T1.M-7_x"), {{"a", 1}});
  CHECK(first.created);
  CHECK(first.instance.status == InstanceStatus::queued);
  const auto again = f.client().create("noop", InstanceId("chat:T1.M-7_x"), {{"a", 2}});
  CHECK_FALSE(again.created);
  CHECK(again.instance.input == json{{"a", 1}});
  CHECK_THROWS_AS(f.client().create("noop", InstanceId("has space"), json::object()),
                  InvalidArgument);
  CHECK_THROWS_AS(f.client().create("noop", InstanceId(std::string(256, 'a')), json::object()),
                  InvalidArgument);
  CHECK_THROWS_AS(f.client().create("unknown", InstanceId("i-2"), json::object()), InvalidArgument);
  CHECK_THROWS_AS(f.client().get(InstanceId("i-404")), NotFound);
}

TEST_CASE("the history records what happened to an instance") {
  CoordinatorFixture f;
  f.add("story", [](const json&, coordinator::Step& step) {
    step.run("a", [](std::stop_token) { return json(1); });
    step.sleep("nap", 1s);
    return json("end");
  });
  f.create("story", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  f.db.advance_clock(1100ms);
  REQUIRE(executor->run_one());
  std::vector<std::string> whats;
  for (const auto& h : f.client().history(InstanceId("i-1"))) whats.push_back(h.what);
  CHECK(whats == std::vector<std::string>{"created", "step succeeded", "sleep", "waiting", "woke",
                                          "complete"});
}

TEST_CASE("a stale executor's writes are refused after another took the instance over") {
  CoordinatorFixture f;
  std::atomic<int> body_runs{0};
  f.add("contested", [&](const json&, coordinator::Step& step) {
    return step.run("work", [&](std::stop_token) {
      if (++body_runs == 1) failpoint::hit("test.inside_body");  // only the first executor
      return json("result of run " + std::to_string(body_runs.load()));
    });
  });
  f.create("contested", "i-1");
  auto stale = f.executor({}, "executor-stale");
  auto fresh = f.executor({}, "executor-fresh");
  failpoint::arm("test.inside_body", failpoint::Action::pause);
  std::thread first([&] { stale->run_one(); });
  REQUIRE(failpoint::wait_until_paused("test.inside_body", 10s));
  // The stale executor is stuck past its lease (30 s on the database clock).
  f.db.advance_clock(31s);
  REQUIRE(fresh->run_one());
  CHECK(f.status("i-1") == InstanceStatus::complete);
  failpoint::release("test.inside_body");
  first.join();
  const auto i = f.client().get(InstanceId("i-1"));
  CHECK(i.output == "result of run 2");  // the stale executor's result never landed
  CHECK(i.generation.value() == 2);
  const auto steps = f.client().steps(InstanceId("i-1"));
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].generation.value() == 2);
  bool taken_over = false;
  for (const auto& h : f.client().history(InstanceId("i-1"))) taken_over |= h.what == "taken over";
  CHECK(taken_over);
}

TEST_CASE("a running executor is woken by a creation and by an event, not by polling") {
  CoordinatorFixture f;
  f.add("echo", [](const json& input, coordinator::Step& step) {
    const json ev = step.wait_for_event("go", coordinator::EventWait{"go", json::object(), 600s});
    return json{{"input", input}, {"event", ev}};
  });
  coordinator::Options options;
  options.poll_interval = 60s;  // a poll would be far too late for the checks below
  options.threads = 2;
  auto executor = f.executor(options);
  std::thread loop([&] { executor->run(); });
  const auto wait_for = [&](InstanceStatus wanted) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (f.status("i-1") != wanted && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(5ms);
    }
    return f.status("i-1") == wanted;
  };
  // Ready when the executor's session has run its LISTEN (the server's word, not a guess).
  const auto listening = [&] {
    return f.sql(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state = 'idle' AND query LIKE 'LISTEN%runledger_wf%'")[0][0]
               .as<int>() == 1;
  };
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!listening() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE(listening());
  f.create("echo", "i-1", {{"n", 1}});
  CHECK(wait_for(InstanceStatus::waiting));
  f.client().send_event(InstanceId("i-1"), "go", {{"ok", true}}, "go-1");
  CHECK(wait_for(InstanceStatus::complete));
  executor->request_stop();
  loop.join();
  CHECK(f.client().get(InstanceId("i-1")).output ==
        json{{"input", {{"n", 1}}}, {"event", {{"ok", true}}}});
}

TEST_CASE(
    "an executor claims the oldest due instance across its workflows, past others' due ones") {
  CoordinatorFixture f;
  std::vector<std::string> order;
  f.add("a", [&](const json&, coordinator::Step& step) {
    order.push_back(step.instance_id().value());
    return json(1);
  });
  f.add("b", [&](const json&, coordinator::Step& step) {
    order.push_back(step.instance_id().value());
    return json(1);
  });
  f.add("elsewhere", [](const json&, coordinator::Step&) { return json(1); });
  // Due instances of a workflow this executor does not run come first: never claimed, not in
  // the way.
  std::vector<std::pair<InstanceId, json>> stranded;
  for (int i = 0; i < 200; ++i)
    stranded.emplace_back(InstanceId("x-" + std::to_string(i)), json::object());
  CHECK(f.client().create_batch("elsewhere", stranded) == 200);
  CHECK(f.client().create_batch("elsewhere", stranded) == 0);  // idempotent on the ids
  f.create("b", "b-1");
  f.db.advance_clock(10ms);
  f.create("a", "a-1");
  f.db.advance_clock(10ms);
  f.create("b", "b-2");
  coordinator::Registry mine;
  for (const auto* name : {"a", "b"}) mine.add(*f.registry.find(name));
  coordinator::Executor executor(f.db.url(), mine, "executor-ab");
  while (executor.run_one()) {
  }
  CHECK(order == std::vector<std::string>{"b-1", "a-1", "b-2"});
  CHECK(f.status("x-0") == InstanceStatus::queued);
  CHECK_THROWS_AS(f.client().create_batch("elsewhere", {{InstanceId("bad id"), json::object()}}),
                  InvalidArgument);
}
