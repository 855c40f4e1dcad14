// Parallel branches (Step::all) and the first of several event waits (Step::wait_any).
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "errors/errors.h"
#include "tests/coordinator/coordinator_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;
using coordinator::Branch;
using coordinator::EventMatch;
using coordinator::EventWait;
using coordinator::InstanceStatus;

namespace {

std::vector<std::string> step_keys(CoordinatorFixture& f, const std::string& id) {
  std::vector<std::string> keys;
  for (const auto& s : f.client().steps(InstanceId(id))) keys.push_back(s.step_key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace

TEST_CASE("all() runs its branches side by side, each step named by its branch") {
  CoordinatorFixture f;
  // Each branch waits until both have started: run one after the other, they would time out.
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  bool met = true;
  const auto meet = [&] {
    std::unique_lock lock(mu);
    ++started;
    cv.notify_all();
    if (!cv.wait_for(lock, 10s, [&] { return started >= 2; })) met = false;
  };
  f.add("fan", [&](const json&, coordinator::Step& step) {
    const auto values =
        step.all("fan", std::vector<Branch>{
                            [&](coordinator::Step& b) {
                              return b.run("fetch", [&](std::stop_token) {
                                meet();
                                return json("left");
                              });
                            },
                            [&](coordinator::Step& b) {
                              b.run("fetch", [&](std::stop_token) {
                                meet();
                                return json(1);
                              });
                              return b.run("fetch", [](std::stop_token) { return json("right"); });
                            },
                        });
    return json(values);
  });
  f.create("fan", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK(met);
  CHECK(f.client().get(InstanceId("i-1")).output == json::array({"left", "right"}));
  CHECK(step_keys(f, "i-1") ==
        std::vector<std::string>{"fan#1/0/fetch#1", "fan#1/1/fetch#1", "fan#1/1/fetch#2"});
}

TEST_CASE("a waiting branch makes the instance wait; finished branches are not run again") {
  CoordinatorFixture f;
  std::atomic<int> quick_runs{0};
  f.add("fan", [&](const json&, coordinator::Step& step) {
    const auto values =
        step.all("fan", std::vector<Branch>{
                            [&](coordinator::Step& b) {
                              return b.run("quick", [&](std::stop_token) {
                                ++quick_runs;
                                return json("quick");
                              });
                            },
                            [&](coordinator::Step& b) {
                              b.sleep("nap", 5s);
                              return json("slept");
                            },
                            [&](coordinator::Step& b) {
                              return b.wait_for_event("ok", EventWait{"ok", json::object(), 60s});
                            },
                        });
    return json(values);
  });
  f.create("fan", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK(f.status("i-1") == InstanceStatus::waiting);
  // The instance waits until the earliest of its branches' due times (the 5 s sleep).
  CHECK_FALSE(executor->run_one());
  f.db.advance_clock(5100ms);
  REQUIRE(executor->run_one());
  CHECK(f.status("i-1") == InstanceStatus::waiting);  // the event is still missing
  f.client().send_event(InstanceId("i-1"), "ok", {{"n", 7}}, "ok-1");
  REQUIRE(executor->run_one());
  CHECK(f.client().get(InstanceId("i-1")).output == json::array({"quick", "slept", {{"n", 7}}}));
  CHECK(quick_runs == 1);
}

TEST_CASE("all() re-throws the lowest-numbered failed branch once every branch has ended") {
  CoordinatorFixture f;
  std::atomic<bool> last_ran{false};
  f.add("fan", [&](const json&, coordinator::Step& step) {
    std::vector<Branch> branches;
    branches.push_back(
        [](coordinator::Step& b) { return b.run("ok", [](std::stop_token) { return json(0); }); });
    for (int i = 1; i <= 2; ++i) {
      branches.push_back([i](coordinator::Step& b) -> json {
        return b.run("boom", [i](std::stop_token) -> json {
          throw coordinator::NonRetryable("branch " + std::to_string(i) + " failed");
        });
      });
    }
    branches.push_back([&](coordinator::Step& b) {
      return b.run("last", [&](std::stop_token) {
        last_ran = true;
        return json(3);
      });
    });
    step.all("fan", branches);
    return json("unreachable");
  });
  f.create("fan", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  const auto instance = f.client().get(InstanceId("i-1"));
  CHECK(instance.status == InstanceStatus::errored);
  CHECK(instance.error["step"] == "fan#1/1/boom#1");
  CHECK(instance.error["message"] == "branch 1 failed");
  CHECK(last_ran);
}

TEST_CASE("branches nest, and their identity is the path of branch numbers") {
  CoordinatorFixture f;
  f.add("nest", [&](const json&, coordinator::Step& step) {
    const auto inner = [](coordinator::Step& b) {
      const auto v = b.all("in", std::vector<Branch>{[](coordinator::Step& c) {
                             return c.run("x", [](std::stop_token) { return json(1); });
                           }});
      return v[0];
    };
    return json(step.all("out", std::vector<Branch>{inner, inner}));
  });
  f.create("nest", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK(f.client().get(InstanceId("i-1")).output == json::array({1, 1}));
  CHECK(step_keys(f, "i-1") ==
        std::vector<std::string>{"out#1/0/in#1/0/x#1", "out#1/1/in#1/0/x#1"});
}

TEST_CASE("wait_any takes the first matching event; a later event for the other stays buffered") {
  CoordinatorFixture f;
  f.add("either", [&](const json&, coordinator::Step& step) {
    const auto first = step.wait_any(
        "decision",
        {EventMatch{"approved", json::object()}, EventMatch{"rejected", {{"final", true}}}}, 60s);
    // The alternative that lost is cancelled: its event, sent later, is left for this wait.
    const json rejected = step.wait_for_event("later", EventWait{"rejected", json::object(), 60s});
    return json{{"index", first.index}, {"payload", first.payload}, {"later", rejected}};
  });
  f.create("either", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK(f.status("i-1") == InstanceStatus::waiting);
  // Not matching the second alternative (final is false): ignored by wait_any, kept buffered.
  f.client().send_event(InstanceId("i-1"), "rejected", {{"final", false}, {"n", 1}}, "r-1");
  REQUIRE(executor->run_one());
  CHECK(f.status("i-1") == InstanceStatus::waiting);
  f.client().send_event(InstanceId("i-1"), "approved", {{"by", "bob"}}, "a-1");
  f.client().send_event(InstanceId("i-1"), "rejected", {{"final", true}, {"n", 2}}, "r-2");
  REQUIRE(executor->run_one());
  const auto instance = f.client().get(InstanceId("i-1"));
  REQUIRE(instance.status == InstanceStatus::complete);
  CHECK(instance.output["index"] == 0);
  CHECK(instance.output["payload"] == json{{"by", "bob"}});
  // The oldest unconsumed "rejected" event (n = 1) went to the later wait; n = 2 is still there.
  CHECK(instance.output["later"]["n"] == 1);
  CHECK(
      f.sql(
           "SELECT count(*) FROM wf_events WHERE instance_id = 'i-1' AND consumed_by IS NULL")[0][0]
          .as<int>() == 1);
}

TEST_CASE("wait_any reports which alternative matched, takes buffered events, and times out") {
  CoordinatorFixture f;
  f.add("either", [&](const json& input, coordinator::Step& step) -> json {
    try {
      const auto got = step.wait_any(
          "pick", {EventMatch{"a", json::object()}, EventMatch{"b", json::object()}}, 10s);
      return json{{"index", got.index}};
    } catch (const coordinator::EventTimeout& e) {
      return json{{"timed_out", e.step_key()}, {"input", input}};
    }
  });
  f.create("either", "buffered");
  f.client().send_event(InstanceId("buffered"), "b", json::object(),
                        "b-1");  // before the wait exists
  f.create("either", "nothing");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  REQUIRE(executor->run_one());
  CHECK(f.client().get(InstanceId("buffered")).output == json{{"index", 1}});
  CHECK(f.status("nothing") == InstanceStatus::waiting);
  f.db.advance_clock(10100ms);
  REQUIRE(executor->run_one());
  CHECK(f.client().get(InstanceId("nothing")).output["timed_out"] == "pick#1");
  // The timeout is recorded: replaying the instance finds it, no event changes it.
  const auto steps = f.client().steps(InstanceId("nothing"));
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].kind == coordinator::StepKind::wait_any);
  CHECK(steps[0].state == coordinator::StepState::failed);
}
