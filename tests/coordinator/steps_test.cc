// step.run: memoized values and errors, retries with the stored config, cooperative timeouts,
// the value and step caps, and non-determinism (invariant 9).
#include <atomic>
#include <thread>

#include "errors/errors.h"
#include "tests/coordinator/coordinator_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;
using coordinator::InstanceStatus;
using coordinator::StepConfig;

TEST_CASE("a completed step is not run again when the workflow replays") {
  CoordinatorFixture f;
  std::atomic<int> a_runs{0}, b_runs{0};
  f.add("two-steps", [&](const json& input, coordinator::Step& step) {
    const json a = step.run("a", [&](std::stop_token) {
      ++a_runs;
      return json{{"n", input["n"].get<int>() + 1}};
    });
    step.sleep("pause", 1s);
    const json b = step.run("b", [&](std::stop_token) {
      ++b_runs;
      return json{{"n", a["n"].get<int>() * 10}};
    });
    return b;
  });
  f.create("two-steps", "i-1", {{"n", 4}});
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK(f.status("i-1") == InstanceStatus::waiting);
  CHECK_FALSE(executor->run_one());  // the sleep is not due
  f.db.advance_clock(1100ms);
  REQUIRE(executor->run_one());
  const auto done = f.client().get(InstanceId("i-1"));
  CHECK(done.status == InstanceStatus::complete);
  CHECK(done.output == json{{"n", 50}});
  CHECK(a_runs == 1);
  CHECK(b_runs == 1);
  const auto steps = f.client().steps(InstanceId("i-1"));
  REQUIRE(steps.size() == 3);
  CHECK(steps[0].step_key == "a#1");
  CHECK(steps[0].output == json{{"n", 5}});
}

TEST_CASE("a step's identity is name#count, so differently named steps may be reordered") {
  CoordinatorFixture f;
  std::atomic<bool> swapped{false};
  std::atomic<int> runs{0};
  f.add("reorder", [&](const json&, coordinator::Step& step) {
    const auto one = [&](const char* name) {
      return step.run(name, [&, name](std::stop_token) {
        ++runs;
        return json(name);
      });
    };
    json out = json::array();
    if (swapped) {
      out.push_back(one("y"));
      out.push_back(one("x"));
    } else {
      out.push_back(one("x"));
      out.push_back(one("y"));
    }
    out.push_back(one("x"));  // x#2
    step.sleep("end", 1s);
    return out;
  });
  f.create("reorder", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  swapped = true;
  f.db.advance_clock(1100ms);
  REQUIRE(executor->run_one());
  CHECK(f.client().get(InstanceId("i-1")).output == json::array({"y", "x", "x"}));
  CHECK(runs == 3);
}

TEST_CASE("a failed attempt is retried after its delay with the stored config") {
  CoordinatorFixture f;
  std::atomic<int> attempts{0};
  std::atomic<bool> second_execution{false};
  f.add("flaky", [&](const json&, coordinator::Step& step) {
    StepConfig config;
    config.retries = 3;
    config.delay = 1000ms;
    config.backoff = coordinator::Backoff::linear;
    if (second_execution) config.retries = 0;  // ignored: the stored config wins
    return step.run("call", config, [&](std::stop_token) -> json {
      if (++attempts < 3) throw std::runtime_error("transient " + std::to_string(attempts));
      return "ok";
    });
  });
  f.create("flaky", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());  // attempt 1 fails; retry in 1 s
  CHECK(f.status("i-1") == InstanceStatus::waiting);
  second_execution = true;
  f.db.advance_clock(1100ms);
  REQUIRE(executor->run_one());  // attempt 2 fails; retry in 2 s (linear)
  CHECK(f.status("i-1") == InstanceStatus::waiting);
  f.db.advance_clock(1100ms);
  CHECK_FALSE(executor->run_one());
  f.db.advance_clock(1000ms);
  REQUIRE(executor->run_one());
  const auto done = f.client().get(InstanceId("i-1"));
  CHECK(done.status == InstanceStatus::complete);
  CHECK(done.output == "ok");
  CHECK(attempts == 3);
  CHECK(f.client().steps(InstanceId("i-1"))[0].attempts == 3);
  int failed_attempts = 0;
  for (const auto& h : f.client().history(InstanceId("i-1")))
    failed_attempts += h.what == "attempt failed";
  CHECK(failed_attempts == 2);
}

TEST_CASE("a final error is recorded and re-thrown on replay without running the body") {
  CoordinatorFixture f;
  std::atomic<int> runs{0};
  f.add("fails", [&](const json&, coordinator::Step& step) {
    std::string caught;
    try {
      step.run("doomed",
               StepConfig{5, 1000ms, coordinator::Backoff::constant, std::nullopt, std::nullopt},
               [&](std::stop_token) -> json {
                 ++runs;
                 throw coordinator::NonRetryable("the remote said no");
               });
    } catch (const coordinator::StepError& e) {
      caught = std::string(e.step_key()) + ": " + e.what() + " (" +
               std::string(to_string(e.kind())) + ")";
    }
    step.sleep("after", 1s);
    return json(caught);
  });
  f.create("fails", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  f.db.advance_clock(1100ms);
  REQUIRE(executor->run_one());
  CHECK(runs == 1);  // NonRetryable: no retries; and not run again on replay
  CHECK(f.client().get(InstanceId("i-1")).output == "doomed#1: the remote said no (non_retryable)");
}

TEST_CASE("an uncaught step error ends the instance errored, naming the step") {
  CoordinatorFixture f;
  f.add("uncaught", [&](const json&, coordinator::Step& step) {
    return step.run("boom", [](std::stop_token) -> json { throw std::runtime_error("bad"); });
  });
  f.create("uncaught", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  const auto i = f.client().get(InstanceId("i-1"));
  CHECK(i.status == InstanceStatus::errored);
  CHECK(i.error["step"] == "boom#1");
  CHECK(i.error["message"] == "bad");
}

TEST_CASE("an attempt past its timeout is stopped through its token and its value discarded") {
  CoordinatorFixture f;
  std::atomic<bool> saw_stop{false};
  f.add("slow", [&](const json&, coordinator::Step& step) {
    StepConfig config;
    config.timeout = 100ms;
    return step.run("slow", config, [&](std::stop_token stop) -> json {
      while (!stop.stop_requested()) std::this_thread::sleep_for(5ms);
      saw_stop = true;
      return "late value";
    });
  });
  f.create("slow", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  const auto i = f.client().get(InstanceId("i-1"));
  CHECK(saw_stop);
  CHECK(i.status == InstanceStatus::errored);
  CHECK(i.error["kind"] == "timeout");
  CHECK(i.error["step"] == "slow#1");
  CHECK(f.client().steps(InstanceId("i-1"))[0].output.is_null());
}

TEST_CASE("a step value over the size cap is an error naming the step") {
  CoordinatorFixture f;
  f.add("big", [&](const json&, coordinator::Step& step) {
    return step.run("big", [](std::stop_token) { return json(std::string(2000, 'x')); });
  });
  f.create("big", "i-1");
  coordinator::Options options;
  options.max_value_bytes = 1000;
  auto executor = f.executor(options);
  REQUIRE(executor->run_one());
  const auto i = f.client().get(InstanceId("i-1"));
  CHECK(i.status == InstanceStatus::errored);
  CHECK(i.error["kind"] == "value_too_large");
  CHECK(i.error["step"] == "big#1");
}

TEST_CASE("a step count over the cap ends the instance, naming the step") {
  CoordinatorFixture f;
  f.add("many", [&](const json&, coordinator::Step& step) {
    for (int i = 0; i < 10; ++i) {
      try {
        step.run("s", [](std::stop_token) { return json(1); });
      } catch (const coordinator::StepError&) {
        // swallowed by the workflow: the cap still ends the instance
      }
    }
    return json("done");
  });
  f.create("many", "i-1");
  coordinator::Options options;
  options.max_steps = 5;
  auto executor = f.executor(options);
  REQUIRE(executor->run_one());
  const auto i = f.client().get(InstanceId("i-1"));
  CHECK(i.status == InstanceStatus::errored);
  CHECK(i.error["kind"] == "step_limit");
  CHECK(i.error["step"] == "s#6");
}

TEST_CASE("a replayed call of another kind than the recorded step is a named non-determinism") {
  CoordinatorFixture f;
  std::atomic<bool> changed{false};
  f.add("drifts", [&](const json&, coordinator::Step& step) {
    if (changed) {
      step.sleep("x", 1s);  // the record holds a run step under x#1
    } else {
      step.run("x", [](std::stop_token) { return json(1); });
    }
    step.sleep("wait", 1s);
    return json("done");
  });
  f.create("drifts", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  changed = true;
  f.db.advance_clock(1100ms);
  REQUIRE(executor->run_one());
  const auto i = f.client().get(InstanceId("i-1"));
  CHECK(i.status == InstanceStatus::errored);
  CHECK(i.error["kind"] == "non_determinism");
  CHECK(i.error["step"] == "x#1");
}
