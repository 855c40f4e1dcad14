// The crash sweep's workflow, shared by the executor process (sweep_executor.cc) and the test
// (crash_sweep_test.cc): run with a retry, sleep, wait for an event, spawn a child and wait for
// its end, run again. Each step body appends "<instance> <step>" to a log file as it runs, so
// that body executions are counted outside the database.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "coordinator/coordinator.h"

namespace runledger::testing {

class SweepWorkflow : public coordinator::Workflow {
 public:
  explicit SweepWorkflow(std::string log) : log_(std::move(log)) {}

  coordinator::json run(const coordinator::json&, coordinator::Step& step) override {
    using coordinator::json;
    const std::string id = step.instance_id().value();
    coordinator::StepConfig retry_once;
    retry_once.retries = 1;
    retry_once.delay = std::chrono::milliseconds(0);
    const json a = step.run("a", retry_once, [&](std::stop_token) -> json {
      // The first execution fails: the retry is part of what the sweep crashes through.
      if (executions(id, "a") == 0) {
        record(id, "a");
        throw std::runtime_error("first attempt of a fails");
      }
      record(id, "a");
      return json{{"a", 1}};
    });
    step.sleep("nap", std::chrono::milliseconds(200));
    const json go = step.wait_for_event("go", {"go", json::object(), std::chrono::seconds(60)});
    ledger::DispatchRequest child;
    child.thread_key = "sweep/" + id;
    child.requester = "sweep";
    const RunId run = step.spawn("child", child);
    const json finished = step.wait_for_event(
        "child-done", {"run-finished", {{"run_id", run.value()}}, std::chrono::seconds(60)});
    const json b = step.run("b", [&](std::stop_token) {
      record(id, "b");
      return json{{"b", a["a"].get<int>() + 1}};
    });
    return json{{"a", a}, {"go", go}, {"child", finished["status"]}, {"b", b}};
  }

  int executions(const std::string& id, const std::string& step) const {
    return count_executions(log_, id, step);
  }

  static int count_executions(const std::string& log, const std::string& id,
                              const std::string& step) {
    std::ifstream in(log);
    int n = 0;
    for (std::string i, s; in >> i >> s;) n += i == id && s == step;
    return n;
  }

 private:
  void record(const std::string& id, const std::string& step) const { append(log_, id, step); }

 public:
  static void append(const std::string& log, const std::string& id, const std::string& step) {
    const std::string line = id + " " + step + "\n";
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0 || ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      throw std::runtime_error("cannot append to " + log);
    }
    ::close(fd);
  }

 private:
  std::string log_;
};

// The extended sweep (part 2): a saga. reserve (retried once, compensated by "release"), two
// branches (one sleeps first), wait_any for approve or cancel (both buffered: approve wins and
// the cancel stays buffered for the next wait), a child run, charge (compensated by "refund"),
// then ship fails for good: the rollback refunds, then releases. Compensation bodies are logged
// as "<instance> undo-<handler>".
class SagaSweepWorkflow : public coordinator::Workflow {
 public:
  explicit SagaSweepWorkflow(std::string log) : log_(std::move(log)) {}

  coordinator::json run(const coordinator::json&, coordinator::Step& step) override {
    using coordinator::json;
    const std::string id = step.instance_id().value();
    coordinator::StepConfig reserve_config;
    reserve_config.retries = 1;
    reserve_config.delay = std::chrono::milliseconds(0);
    reserve_config.compensation = "release";
    const json reserved = step.run("reserve", reserve_config, [&](std::stop_token) -> json {
      SweepWorkflow::append(log_, id, "reserve");
      if (SweepWorkflow::count_executions(log_, id, "reserve") == 1) {
        throw std::runtime_error("first attempt of reserve fails");
      }
      return json("seat-1");
    });
    const auto fan = step.all("fan", std::vector<coordinator::Branch>{
                                         [&](coordinator::Step& b) {
                                           return b.run("left", [&](std::stop_token) {
                                             SweepWorkflow::append(log_, id, "left");
                                             return json("L");
                                           });
                                         },
                                         [&](coordinator::Step& b) {
                                           b.sleep("nap", std::chrono::milliseconds(200));
                                           return b.run("right", [&](std::stop_token) {
                                             SweepWorkflow::append(log_, id, "right");
                                             return json("R");
                                           });
                                         },
                                     });
    const auto decision = step.wait_any("decide",
                                        {coordinator::EventMatch{"approve", json::object()},
                                         coordinator::EventMatch{"cancel", json::object()}},
                                        std::chrono::seconds(60));
    const json cancel =
        step.wait_for_event("late-cancel", {"cancel", json::object(), std::chrono::seconds(60)});
    ledger::DispatchRequest child;
    child.thread_key = "saga/" + id;
    child.requester = "sweep";
    const RunId run = step.spawn("child", child);
    step.wait_for_event("child-done",
                        {"run-finished", {{"run_id", run.value()}}, std::chrono::seconds(60)});
    coordinator::StepConfig charge_config;
    charge_config.compensation = "refund";
    step.run("charge", charge_config, [&](std::stop_token) {
      SweepWorkflow::append(log_, id, "charge");
      return json{
          {"reserved", reserved}, {"fan", fan}, {"decision", decision.index}, {"cancel", cancel}};
    });
    return step.run("ship", [&](std::stop_token) -> json {
      SweepWorkflow::append(log_, id, "ship");
      throw coordinator::NonRetryable("the truck is full");
    });
  }

  // The compensations the saga names, logging each run of their bodies.
  static void register_compensations(coordinator::Registry& registry, const std::string& log) {
    for (const std::string name : {"release", "refund"}) {
      registry.add_compensation(coordinator::Compensation{
          name, {}, [log, name](const coordinator::UndoRequest& undo, std::stop_token) {
            SweepWorkflow::append(log, undo.instance_id.value(), "undo-" + name);
          }});
    }
  }

 private:
  std::string log_;
};

}  // namespace runledger::testing
