// The crash sweep: the sweep workflow (run with a retry, sleep, wait, spawn, wait for the child,
// run) is executed once by an executor process to count its journal writes N; then for every k
// in 1..N an executor process is killed with SIGKILL right after its k-th write (failpoint
// coordinator.after_write) and a fresh executor process resumes. Every execution must end with
// the uninterrupted one's output, with one child run, and no step body may run more often than
// the record says it ran.
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
  }
  ~SweepFixture() { fs::remove_all(dir); }

  pid_t start_executor(const std::string& failpoints, const fs::path& output) {
    std::map<std::string, std::optional<std::string>> env;
    env["RUNLEDGER_FAILPOINTS"] =
        failpoints.empty() ? std::nullopt : std::optional<std::string>(failpoints);
    return spawn(SWEEP_EXECUTOR, {db.url(), log.string()}, env, output.string());
  }

  // Creates instance `id` with its "go" event already buffered.
  void create_instance(const std::string& id) {
    create("sweep", id);
    client().send_event(id, "go", {{"ok", true}}, "go");
  }

  bool wait_until_complete(const std::string& id, std::chrono::seconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      const auto s = status(id);
      if (s == coordinator::InstanceStatus::complete || s == coordinator::InstanceStatus::errored)
        return true;
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

}  // namespace

TEST_CASE("crash sweep: an executor killed after any journal write is resumed to the same end") {
  SweepFixture f;
  ChildFinisher children(f.ledger);

  // The uninterrupted execution: its output, and N.
  f.create_instance("sweep-0");
  const fs::path count_output = f.dir / "count.out";
  const pid_t counter = f.start_executor("coordinator.after_write=kill@1000000", count_output);
  REQUIRE(f.wait_until_complete("sweep-0", 60s));
  kill(counter, SIGTERM);
  REQUIRE(wait_exit(counter) == 0);
  const auto reference = f.client().get("sweep-0");
  REQUIRE(reference.status == coordinator::InstanceStatus::complete);
  int writes = 0;
  {
    std::ifstream in(count_output);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("journal writes: ", 0) == 0) writes = std::stoi(line.substr(16));
    }
  }
  std::printf("crash sweep: N = %d journal writes, output %s\n", writes,
              reference.output.dump().c_str());
  REQUIRE(writes >= 8);

  int kills = 0;
  for (int k = 1; k <= writes; ++k) {
    const std::string id = "sweep-" + std::to_string(k);
    f.create_instance(id);
    const pid_t doomed = f.start_executor("coordinator.after_write=kill@" + std::to_string(k),
                                          f.dir / ("killed-" + std::to_string(k) + ".out"));
    // N depends a little on timing (a sleep or a child already done when the replay reaches it
    // saves a suspension), so the last k may be past this execution's writes: then the instance
    // completes without the kill, and the executor is stopped.
    const auto until = std::chrono::steady_clock::now() + 60s;
    for (;;) {
      int status = 0;
      if (waitpid(doomed, &status, WNOHANG) == doomed) {
        CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
        ++kills;
        break;
      }
      if (f.status(id) == coordinator::InstanceStatus::complete) {
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
    const bool done = f.wait_until_complete(id, 60s);
    kill(fresh, SIGTERM);
    // It may have had nothing to do (killed after its last write) and not even be up yet.
    const int fresh_exit = wait_exit(fresh);
    CHECK((fresh_exit == 0 || fresh_exit == 128 + SIGTERM));
    REQUIRE(done);
    INFO("killed after journal write " << k);
    const auto resumed = f.client().get(id);
    CHECK(resumed.status == coordinator::InstanceStatus::complete);
    CHECK(resumed.output == reference.output);
    CHECK(f.sql("SELECT count(*) FROM live_runs WHERE parent_instance_id = '" + id + "'")[0][0]
              .as<int>() == 1);
    const SweepWorkflow counter_view(f.log.string());
    for (const auto& s : f.client().steps(id)) {
      if (s.kind != "run") continue;
      const std::string name = s.step_key.substr(0, s.step_key.find('#'));
      CHECK(counter_view.executions(id, name) == s.attempts);
    }
  }
  std::printf("crash sweep: %d of %d executions killed after their k-th write\n", kills, writes);
  CHECK(kills >= writes - 2);
}
