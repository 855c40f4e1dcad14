// The crash sweep: a workflow is executed once by an executor process to count its journal writes
// N; then for every k in 1..N an executor process is killed with SIGKILL right after its k-th
// write (failpoint coordinator.after_write) and a fresh executor process resumes. Every execution
// must end as the uninterrupted one did (status, output, error and rollback), with one child run,
// no step body run more often than the record says it ran, and each compensation run once.
// Two workflows: "sweep" (run with a retry, sleep, wait, spawn, wait for the child, run) and the
// saga of part 2 (branches, wait_any, compensation and rollback on top of those).
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/coordinator/coordinator_fixture.h"
#include "tests/coordinator/sweep_workflow.h"
#include "tests/support/child_process.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

struct SweepFixture : CoordinatorFixture {
  SweepFixture() {
    coordinator::Registration r;
    r.name = "sweep";
    r.workflow = std::make_shared<SweepWorkflow>(log.string());
    registry.add(std::move(r));
    coordinator::Registration saga;
    saga.name = "saga";
    saga.workflow = std::make_shared<SagaSweepWorkflow>(log.string());
    registry.add(std::move(saga));
  }
  ~SweepFixture() { fs::remove_all(dir); }

  pid_t start_executor(const std::string& failpoints, const fs::path& output) {
    std::map<std::string, std::optional<std::string>> env;
    env["RUNLEDGER_FAILPOINTS"] =
        failpoints.empty() ? std::nullopt : std::optional<std::string>(failpoints);
    return spawn(SWEEP_EXECUTOR, {db.url(), log.string()}, env, output.string());
  }

  // Creates instance `id` of `workflow` with the events it waits for already buffered.
  void create_instance(const std::string& workflow, const std::string& id) {
    create(workflow, id);
    if (workflow == "sweep") {
      client().send_event(InstanceId(id), "go", {{"ok", true}}, "go");
    } else {
      client().send_event(InstanceId(id), "approve", {{"n", 1}}, "approve");
      client().send_event(InstanceId(id), "cancel", {{"n", 2}}, "cancel");
    }
  }

  bool ended(const std::string& id) {
    const auto s = status(id);
    return s == coordinator::InstanceStatus::complete || s == coordinator::InstanceStatus::errored;
  }

  bool wait_until_ended(const std::string& id, std::chrono::seconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (ended(id)) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  fs::path dir = fs::temp_directory_path() / ("sweep-" + random_uuid());
  fs::path log = (fs::create_directories(dir), dir / "bodies.log");
};

// Finishes every child run the workflow spawns, as a bot would.
class ChildFinisher {
 public:
  explicit ChildFinisher(ledger::Ledger& ledger)
      : thread_([this, &ledger] {
          const ledger::Owner bot{SlotName("sweep-bot"), IncarnationId(random_uuid())};
          while (!stop_) {
            for (const auto& c : ledger.claim_next(bot, 8)) {
              ledger.finish(c.run.run_id, c.run.generation, ledger::RunStatus::finished,
                            {{"done", true}});
            }
            std::this_thread::sleep_for(20ms);
          }
        }) {}
  ~ChildFinisher() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Sweeps `workflow`: N from an uninterrupted execution, then one killed execution per k.
void sweep(const std::string& workflow) {
  SweepFixture f;
  ChildFinisher children(f.ledger);

  // The uninterrupted execution: its end, and N.
  const std::string reference_id = workflow + "-0";
  f.create_instance(workflow, reference_id);
  const fs::path count_output = f.dir / "count.out";
  const pid_t counter = f.start_executor("coordinator.after_write=kill@1000000", count_output);
  REQUIRE(f.wait_until_ended(reference_id, 60s));
  kill(counter, SIGTERM);
  REQUIRE(wait_exit(counter) == 0);
  const auto reference = f.client().get(InstanceId(reference_id));
  if (workflow == "saga") {
    REQUIRE(reference.status == coordinator::InstanceStatus::errored);
    REQUIRE(reference.error["message"] == "the truck is full");
    REQUIRE(reference.error["rollback"] == json{{"state", "complete"}, {"compensated", 2}});
    // approve won the wait_any; the cancel stayed buffered and went to the next wait.
    REQUIRE(f.client().steps(InstanceId(reference_id)).size() >= 9);
  } else {
    REQUIRE(reference.status == coordinator::InstanceStatus::complete);
  }
  int writes = 0;
  {
    std::ifstream in(count_output);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("journal writes: ", 0) == 0) writes = std::stoi(line.substr(16));
    }
  }
  std::printf("crash sweep %s: N = %d journal writes, %s, output %s, error %s\n", workflow.c_str(),
              writes, std::string(to_string(reference.status)).c_str(),
              reference.output.dump().c_str(), reference.error.dump().c_str());
  REQUIRE(writes >= 8);

  int kills = 0;
  for (int k = 1; k <= writes; ++k) {
    const std::string id = workflow + "-" + std::to_string(k);
    f.create_instance(workflow, id);
    const pid_t doomed = f.start_executor("coordinator.after_write=kill@" + std::to_string(k),
                                          f.dir / ("killed-" + std::to_string(k) + ".out"));
    // N depends a little on timing (a sleep or a child already done when the replay reaches it
    // saves a suspension), so the last k may be past this execution's writes: then the instance
    // ends without the kill, and the executor is stopped.
    const auto until = std::chrono::steady_clock::now() + 60s;
    for (;;) {
      int status = 0;
      if (waitpid(doomed, &status, WNOHANG) == doomed) {
        CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
        ++kills;
        break;
      }
      if (f.ended(id)) {
        kill(doomed, SIGTERM);
        wait_exit(doomed);
        break;
      }
      REQUIRE(std::chrono::steady_clock::now() < until);
      std::this_thread::sleep_for(20ms);
    }
    // The killed executor's lease (30 s) has not expired: the fresh one waits for nothing else.
    f.db.advance_clock(31s);
    const pid_t fresh = f.start_executor("", f.dir / ("fresh-" + std::to_string(k) + ".out"));
    const bool done = f.wait_until_ended(id, 60s);
    kill(fresh, SIGTERM);
    // It may have had nothing to do (killed after its last write) and not even be up yet.
    const int fresh_exit = wait_exit(fresh);
    CHECK((fresh_exit == 0 || fresh_exit == 128 + SIGTERM));
    REQUIRE(done);
    INFO("killed after journal write " << k);
    const auto resumed = f.client().get(InstanceId(id));
    CHECK(resumed.status == reference.status);
    CHECK(resumed.output == reference.output);
    CHECK(resumed.error == reference.error);
    CHECK(f.sql("SELECT count(*) FROM live_runs WHERE parent_instance_id = '" + id + "'")[0][0]
              .as<int>() == 1);
    const std::string log = f.log.string();
    for (const auto& s : f.client().steps(InstanceId(id))) {
      if (s.kind != coordinator::StepKind::run) continue;
      // A branch's key is "fan#1/0/left#1": the body is logged under its last name.
      const std::string last = s.step_key.substr(s.step_key.rfind('/') + 1);
      const std::string name = last.substr(0, last.find('#'));
      CHECK(SweepWorkflow::count_executions(log, id, name) == s.attempts);
    }
    if (workflow == "saga") {
      CHECK(SweepWorkflow::count_executions(log, id, "undo-refund") == 1);
      CHECK(SweepWorkflow::count_executions(log, id, "undo-release") == 1);
    }
  }
  std::printf("crash sweep %s: %d of %d executions killed after their k-th write\n",
              workflow.c_str(), kills, writes);
  CHECK(kills >= writes - 2);
}

}  // namespace

TEST_CASE("crash sweep: an executor killed after any journal write is resumed to the same end") {
  sweep("sweep");
}

TEST_CASE(
    "crash sweep: a saga with branches, wait_any and a rollback ends the same after any kill") {
  sweep("saga");
}
