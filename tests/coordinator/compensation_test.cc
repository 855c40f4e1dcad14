// Durable compensation: handlers registered by name, run in reverse record order when the
// instance fails or is terminated with rollback, each journaled and retried.
#include <mutex>

#include "errors/errors.h"
#include "tests/coordinator/coordinator_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;
using coordinator::EventWait;
using coordinator::InstanceStatus;
using coordinator::StepConfig;

namespace {

// Handlers that log "<handler>:<step output>" in call order.
struct UndoLog {
  std::mutex mu;
  std::vector<std::string> calls;
  int failures_left = 0;  // of the next calls

  coordinator::Compensation handler(const std::string& name, StepConfig retry = {}) {
    return coordinator::Compensation{
        name, retry, [this, name](const coordinator::UndoRequest& undo, std::stop_token) {
          std::lock_guard lock(mu);
          calls.push_back(name + ":" + undo.output.dump());
          if (failures_left > 0) {
            --failures_left;
            throw std::runtime_error(name + " could not undo yet");
          }
        }};
  }
};

StepConfig undo_with(const std::string& handler) {
  StepConfig c;
  c.compensation = handler;
  return c;
}

// book a hotel, a car and a flight (each undone by its handler), then fail.
json trip(coordinator::Step& step) {
  step.run("hotel", undo_with("cancel-hotel"), [](std::stop_token) { return json("h-1"); });
  step.run("car", undo_with("cancel-car"), [](std::stop_token) { return json("c-1"); });
  step.run("note", [](std::stop_token) { return json("no undo for this one"); });
  step.run("flight", undo_with("cancel-flight"), [](std::stop_token) { return json("f-1"); });
  step.run("pay",
           [](std::stop_token) -> json { throw coordinator::NonRetryable("card declined"); });
  return json("booked");
}

bool history_has(CoordinatorFixture& f, const std::string& id, const std::string& what) {
  for (const auto& h : f.client().history(InstanceId(id))) {
    if (h.what == what) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a failed instance runs its compensations once each, latest step first") {
  CoordinatorFixture f;
  UndoLog undo;
  for (const char* name : {"cancel-hotel", "cancel-car", "cancel-flight"}) {
    f.registry.add_compensation(undo.handler(name));
  }
  f.add("trip", [](const json&, coordinator::Step& step) { return trip(step); });
  f.create("trip", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  const auto instance = f.client().get(InstanceId("i-1"));
  CHECK(instance.status == InstanceStatus::errored);
  CHECK(instance.error["message"] == "card declined");
  CHECK(instance.error["step"] == "pay#1");
  CHECK(instance.error["rollback"]["state"] == "complete");
  CHECK(instance.error["rollback"]["compensated"] == 3);
  CHECK(undo.calls == std::vector<std::string>{R"(cancel-flight:"f-1")", R"(cancel-car:"c-1")",
                                               R"(cancel-hotel:"h-1")"});
  CHECK(f.sql("SELECT count(*) FROM wf_compensations WHERE state = 'succeeded'")[0][0].as<int>() ==
        3);
  CHECK(history_has(f, "i-1", "rolling back"));
  CHECK(history_has(f, "i-1", "compensated"));
  CHECK_FALSE(executor->run_one());  // ended: nothing runs twice
  CHECK(undo.calls.size() == 3);
}

TEST_CASE("a failing compensation is retried, durably, after its delay") {
  CoordinatorFixture f;
  UndoLog undo;
  undo.failures_left = 2;
  StepConfig retry;
  retry.retries = 3;
  retry.delay = 2s;
  retry.backoff = coordinator::Backoff::constant;
  f.registry.add_compensation(undo.handler("cancel-hotel", retry));
  f.add("trip", [](const json&, coordinator::Step& step) -> json {
    step.run("hotel", undo_with("cancel-hotel"), [](std::stop_token) { return json("h-1"); });
    throw std::runtime_error("no flights");
  });
  f.create("trip", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK(f.status("i-1") == InstanceStatus::waiting);  // the retry is 2 s away
  CHECK_FALSE(executor->run_one());
  f.db.advance_clock(2100ms);
  REQUIRE(executor->run_one());  // the second attempt fails too
  CHECK(f.status("i-1") == InstanceStatus::waiting);
  f.db.advance_clock(2100ms);
  REQUIRE(executor->run_one());
  const auto instance = f.client().get(InstanceId("i-1"));
  CHECK(instance.status == InstanceStatus::errored);
  CHECK(instance.error["message"] == "no flights");
  CHECK(instance.error["rollback"]["state"] == "complete");
  CHECK(undo.calls.size() == 3);
  CHECK(f.sql("SELECT attempts FROM wf_compensations")[0][0].as<int>() == 3);
}

TEST_CASE("a compensation no longer registered stops the rollback, naming it") {
  CoordinatorFixture f;
  UndoLog undo;
  f.registry.add_compensation(undo.handler("cancel-hotel"));
  f.registry.add_compensation(undo.handler("cancel-car"));
  f.add("trip", [](const json&, coordinator::Step& step) {
    step.run("hotel", undo_with("cancel-hotel"), [](std::stop_token) { return json("h-1"); });
    step.run("car", undo_with("cancel-car"), [](std::stop_token) { return json("c-1"); });
    return step.wait_for_event("go", EventWait{"go", json::object(), 60s});
  });
  f.create("trip", "i-1");
  REQUIRE(f.executor()->run_one());
  // A new deployment whose registry lost cancel-car: the wait times out there and rolls back.
  coordinator::Registry next;
  coordinator::Registration r = *f.registry.find("trip");
  next.add(std::move(r));
  next.add_compensation(undo.handler("cancel-hotel"));
  f.db.advance_clock(61s);
  coordinator::Executor executor(f.db.url(), next, "executor-2");
  REQUIRE(executor.run_one());
  const auto instance = f.client().get(InstanceId("i-1"));
  CHECK(instance.status == InstanceStatus::errored);
  CHECK(instance.error["kind"] == "event_timeout");
  CHECK(instance.error["rollback"]["state"] == "stopped");
  CHECK(instance.error["rollback"]["handler"] == "cancel-car");
  CHECK(instance.error["rollback"]["step"] == "car#1");
  CHECK(instance.error["rollback"]["message"].get<std::string>().find("'cancel-car' is not "
                                                                      "registered") !=
        std::string::npos);
  CHECK(undo.calls.empty());  // stopped at the first (latest) step: nothing undone out of order
}

TEST_CASE("a step naming an unknown compensation fails before its body runs") {
  CoordinatorFixture f;
  bool ran = false;
  f.add("typo", [&](const json&, coordinator::Step& step) {
    return step.run("hotel", undo_with("cancel-hotle"), [&](std::stop_token) {
      ran = true;
      return json(1);
    });
  });
  f.create("typo", "i-1");
  REQUIRE(f.executor()->run_one());
  const auto instance = f.client().get(InstanceId("i-1"));
  CHECK(instance.status == InstanceStatus::errored);
  CHECK(instance.error["message"].get<std::string>().find("cancel-hotle") != std::string::npos);
  CHECK_FALSE(ran);
}

TEST_CASE("terminate with rollback undoes the succeeded steps of a waiting instance") {
  CoordinatorFixture f;
  UndoLog undo;
  f.registry.add_compensation(undo.handler("cancel-hotel"));
  f.add("trip", [](const json&, coordinator::Step& step) {
    step.run("hotel", undo_with("cancel-hotel"), [](std::stop_token) { return json("h-1"); });
    return step.wait_for_event("go", EventWait{"go", json::object(), 600s});
  });
  f.create("trip", "i-1");
  f.create("trip", "i-2");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  REQUIRE(executor->run_one());
  f.client().terminate(InstanceId("i-1"), "alice", true);
  f.client().terminate(InstanceId("i-2"), "bob");  // without rollback: ends at once, nothing undone
  CHECK(f.status("i-2") == InstanceStatus::terminated);
  CHECK(f.status("i-1") == InstanceStatus::queued);
  REQUIRE(executor->run_one());
  const auto instance = f.client().get(InstanceId("i-1"));
  CHECK(instance.status == InstanceStatus::terminated);
  CHECK(instance.error["message"] == "terminated by alice");
  CHECK(instance.error["rollback"]["compensated"] == 1);
  CHECK(undo.calls == std::vector<std::string>{R"(cancel-hotel:"h-1")"});
  CHECK(history_has(f, "i-1", "terminating with rollback"));
  CHECK_FALSE(executor->run_one());
  // A restart after the rollback may not reuse the undone step.
  CHECK_THROWS_AS(f.client().restart(InstanceId("i-1"), "go#1", "alice"), Conflict);
  CHECK(f.client().restart(InstanceId("i-1"), "hotel#1", "alice") == 2);
}

TEST_CASE("terminate with rollback ends at once when no compensation is owed") {
  CoordinatorFixture f;
  f.add("plain", [](const json&, coordinator::Step& step) {
    step.run("note", [](std::stop_token) { return json(1); });
    return step.wait_for_event("go", EventWait{"go", json::object(), 600s});
  });
  f.create("plain", "i-1");
  REQUIRE(f.executor()->run_one());
  f.client().terminate(InstanceId("i-1"), "alice", true);
  const auto instance = f.client().get(InstanceId("i-1"));
  CHECK(instance.status == InstanceStatus::terminated);
  CHECK(instance.error["rollback"]["compensated"] == 0);
  CHECK(history_has(f, "i-1", "terminated"));
  CHECK_THROWS_AS(f.client().terminate(InstanceId("i-1"), "alice", true), Conflict);
}
