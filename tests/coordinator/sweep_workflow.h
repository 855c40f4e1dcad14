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
    const std::string id = step.instance_id();
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
    std::ifstream in(log_);
    int n = 0;
    for (std::string i, s; in >> i >> s;) n += i == id && s == step;
    return n;
  }

 private:
  void record(const std::string& id, const std::string& step) const {
    const std::string line = id + " " + step + "\n";
    const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0 || ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      throw std::runtime_error("cannot append to " + log_);
    }
    ::close(fd);
  }

  std::string log_;
};

}  // namespace runledger::testing
