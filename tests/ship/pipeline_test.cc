// The ship pipeline end to end with real processes: a reference bot (`runledger bot`), a
// coordinator running the ship workflow (`runledger coordinator --ship-repo ...`) and the merge
// actor, on a real bare repository. Processes are killed with SIGKILL at named failpoints of the
// coding child and while the coordinator waits; every scenario must end with one change request,
// at most one merge, one deploy, no thread message twice, and the uninterrupted run's end.
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <catch2/catch.hpp>
#include <pqxx/pqxx>

#include "coordinator/coordinator.h"
#include "ids/ids.h"
#include "tests/support/child_process.h"
#include "tests/support/test_database.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using coordinator::json;

namespace {

class Pipeline {
 public:
  Pipeline() {
    fs::create_directories(dir_);
    sh("git init -q --bare -b main " + repo().string());
    sh("git clone -q " + repo().string() + " " + (dir_ / "seed").string());
    sh("git -C " + (dir_ / "seed").string() +
       " -c user.name=t -c user.email=t@example.invalid commit -q --allow-empty -m init");
    sh("git -C " + (dir_ / "seed").string() + " push -q origin main");
  }
  ~Pipeline() {
    for (auto& [name, pid] : processes_) stop(name);
    if (std::getenv("RUNLEDGER_KEEP_TEST_FILES")) {
      std::printf("kept %s\n", dir_.c_str());
    } else {
      fs::remove_all(dir_);
    }
  }

  static void sh(const std::string& command) {
    INFO(command);
    REQUIRE(std::system((command + " >/dev/null 2>&1").c_str()) == 0);
  }
  fs::path repo() const { return dir_ / "origin.git"; }

  // Starts (or restarts) one of the pipeline's processes.
  void start(const std::string& name, const std::string& failpoints = "") {
    std::vector<std::string> args;
    if (name == "bot") {
      args = {"bot", "--slot", "bot-1", "--work-dir", (dir_ / "bot").string()};
    } else if (name == "coordinator") {
      args = {"coordinator",
              "--ship-repo",
              repo().string(),
              "--deploy-root",
              (dir_ / "deploys").string(),
              "--merge-poll-ms",
              "500",
              "--poll-ms",
              "500",
              "--lease-ms",
              "3000"};
    } else {
      args = {"merge-actor", "--ship-repo", repo().string(), "--delay-ms", "300"};
    }
    std::map<std::string, std::optional<std::string>> env = {{"DATABASE_URL", db.url()}};
    env["RUNLEDGER_FAILPOINTS"] =
        failpoints.empty() ? std::nullopt : std::optional<std::string>(failpoints);
    const fs::path log = dir_ / (name + "-" + std::to_string(++starts_) + ".log");
    processes_[name] = spawn(RUNLEDGER_BINARY, args, env, log.string());
  }
  void stop(const std::string& name, int signal = SIGTERM) {
    const auto it = processes_.find(name);
    if (it == processes_.end() || it->second < 0) return;
    kill(it->second, signal);
    wait_exit(it->second);
    it->second = -1;
  }
  // Waits for the process to end on its own (a failpoint killed it); its exit code.
  int wait_for_exit(const std::string& name) {
    const int code = wait_exit(processes_[name]);
    processes_[name] = -1;
    return code;
  }

  int cli(const std::vector<std::string>& args) {
    return wait_exit(
        spawn(RUNLEDGER_BINARY, args, {{"DATABASE_URL", db.url()}}, (dir_ / "cli.log").string()));
  }
  void grant(const std::string& requester) {
    for (const char* capability : {"agent:run:coding", "agent:run:review"}) {
      REQUIRE(cli({"policy", "grant", "--requester", requester, "--capability", capability}) == 0);
    }
  }
  void ship(const std::string& requester, const std::string& verdicts = "approve") {
    REQUIRE(cli({"ship", "--thread", "T1", "--message", "M1", "--requester", requester,
                 "--review-verdicts", verdicts, "Add a SHIP file"}) == 0);
  }

  pqxx::result sql(const std::string& statement) const {
    pqxx::connection conn(db.url());
    return pqxx::nontransaction(conn).exec(statement);
  }
  std::string instance_field(const std::string& field) const {
    const auto rows = sql("SELECT " + field + " FROM wf_instances WHERE workflow = 'ship'");
    return rows.empty() || rows[0][0].is_null() ? "" : rows[0][0].as<std::string>();
  }
  // Waits until the ship instance satisfies `done` (polling), at most `limit`.
  template <typename Done>
  bool wait_until(Done done, std::chrono::seconds limit = 90s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (done()) return true;
      std::this_thread::sleep_for(50ms);
    }
    return done();
  }
  bool finished() const {
    const std::string s = instance_field("status");
    return s == "complete" || s == "errored";
  }
  bool waiting_in(const std::string& step_prefix) const {
    return instance_field("status") == "waiting" &&
           instance_field("current_step").rfind(step_prefix, 0) == 0;
  }

  // The end state every scenario must reach.
  void check_shipped() {
    REQUIRE(wait_until([&] { return finished(); }));
    const json output =
        json::parse(instance_field("output").empty() ? "null" : instance_field("output"));
    INFO("instance: " << instance_field("status") << " " << instance_field("error") << " "
                      << output.dump());
    CHECK(output["status"] == "deployed");
    CHECK(sql("SELECT count(*) FROM change_requests")[0][0].as<int>() == 1);
    CHECK(sql("SELECT count(*) FROM change_requests WHERE state = 'merged'")[0][0].as<int>() == 1);
    CHECK(sql("SELECT count(*) FROM deploys")[0][0].as<int>() == 1);
    CHECK(sql("SELECT count(*) FROM thread_messages")[0][0].as<int>() ==
          sql("SELECT count(DISTINCT body) FROM thread_messages")[0][0].as<int>());
    // One merge commit on main: main's first-parent history is init + the merge.
    const fs::path out = dir_ / "merges.out";
    sh("git --git-dir=" + repo().string() + " rev-list --merges --count main > " + out.string() +
       "; true");
    int merges = -1;
    std::ifstream(out) >> merges;
    CHECK(merges == 1);
    CHECK(fs::exists(dir_ / "deploys" / "current" / "SHIP.md"));
  }

  std::vector<std::string> stages() const {
    std::vector<std::string> out;
    for (const auto& row : sql("SELECT dedupe_key FROM thread_messages ORDER BY id")) {
      const std::string key = row[0].as<std::string>();
      out.push_back(key.substr(key.find('/') + 1));
    }
    return out;
  }

  TestDatabase db;

 private:
  fs::path dir_ = fs::temp_directory_path() / ("ship-e2e-" + random_uuid());
  std::map<std::string, pid_t> processes_;
  int starts_ = 0;
};

const std::vector<std::string> kHappyStages = {"started",  "coded",  "pr",      "review-1",
                                               "approved", "merged", "deployed"};

}  // namespace

TEST_CASE("ship: a chat request is coded, reviewed, merged and deployed") {
  Pipeline p;
  p.grant("alice");
  p.start("bot");
  p.start("coordinator");
  p.start("merge-actor");
  p.ship("alice");
  p.check_shipped();
  CHECK(p.stages() == kHappyStages);
  // The same chat message again starts nothing new.
  p.ship("alice");
  CHECK(p.sql("SELECT count(*) FROM wf_instances")[0][0].as<int>() == 1);
}

TEST_CASE("ship: a review that asks for changes once gets a fix child, then approval") {
  Pipeline p;
  p.grant("alice");
  p.start("bot");
  p.start("coordinator");
  p.start("merge-actor");
  p.ship("alice", "changes,approve");
  p.check_shipped();
  CHECK(p.stages() == std::vector<std::string>{"started", "coded", "pr", "review-1", "fixed-1",
                                               "review-2", "approved", "merged", "deployed"});
  CHECK(p.sql("SELECT count(*) FROM live_runs WHERE profile->>'kind' = 'coding'")[0][0].as<int>() ==
        2);
}

TEST_CASE("ship: an unauthorized requester gets a named refusal and no child") {
  Pipeline p;
  p.start("bot");
  p.start("coordinator");
  p.ship("mallory");
  REQUIRE(p.wait_until([&] { return p.finished(); }));
  CHECK(json::parse(p.instance_field("output"))["status"] == "refused");
  CHECK(p.sql("SELECT count(*) FROM live_runs")[0][0].as<int>() == 0);
  const auto refusal = p.sql("SELECT body FROM thread_messages WHERE dedupe_key LIKE '%refused%'");
  REQUIRE(refusal.size() == 1);
  CHECK(std::string(refusal[0][0].c_str()).find("agent:run:coding") != std::string::npos);
}

TEST_CASE("ship: a child that fails (its budget clipped to the pipeline's) stops the pipeline") {
  Pipeline p;
  p.grant("alice");
  p.start("bot");
  p.start("coordinator");
  // The pipeline declares 2 steps in all: the coding child (4 tool calls) runs out of budget.
  REQUIRE(p.cli({"instances", "create", "--workflow", "ship", "--id", "ship:T1:M2", "--input",
                 R"({"thread": "T1", "message": "M2", "requester": "alice", "request": "x",
                     "budget": {"wall_s": 600, "max_steps": 2}})"}) == 0);
  REQUIRE(p.wait_until([&] { return p.finished(); }));
  CHECK(json::parse(p.instance_field("output"))["status"] == "child_failed");
  CHECK(p.sql("SELECT count(*) FROM change_requests")[0][0].as<int>() == 0);
  CHECK(
      p.sql(
           "SELECT count(*) FROM thread_messages WHERE body LIKE 'A child run ended failed%'")[0][0]
          .as<int>() == 1);
}

TEST_CASE("ship: the bot killed after the push's intent, and after the push, never pushes twice") {
  for (const std::string failpoint : {"bot.after_intent=kill@4", "bot.after_effect=kill@4"}) {
    DYNAMIC_SECTION(failpoint) {
      Pipeline p;
      p.grant("alice");
      p.start("coordinator");
      p.start("merge-actor");
      p.start("bot", failpoint);  // the coding script's 4th call is the push
      p.ship("alice");
      CHECK(p.wait_for_exit("bot") == 128 + SIGKILL);
      p.start("bot");
      p.check_shipped();
      CHECK(p.stages() == kHappyStages);
      // The push in flight was settled as unsafe (never re-run blindly), and the model's re-check
      // ran instead: it pushes only when the remote branch lacks the commit.
      CHECK(p.sql("SELECT count(*) FROM run_steps WHERE tool = 'git_push' "
                  "AND settlement->>'rule' = 'synthetic_unsafe'")[0][0]
                .as<int>() == 1);
      CHECK(p.sql("SELECT count(*) FROM run_steps WHERE call_id = 'push-check'")[0][0].as<int>() ==
            1);
    }
  }
}

TEST_CASE("ship: the coordinator killed while waiting for run-finished and for the merge") {
  Pipeline p;
  p.grant("alice");
  p.start("coordinator");
  p.ship("alice");
  // No bot yet: the coordinator waits for the coding child's end.
  REQUIRE(p.wait_until([&] { return p.waiting_in("code-done"); }));
  p.stop("coordinator", SIGKILL);
  p.start("bot");  // the child runs and finishes while no coordinator is alive
  REQUIRE(p.wait_until([&] {
    return p.sql("SELECT count(*) FROM live_runs WHERE status = 'finished'")[0][0].as<int>() == 1;
  }));
  p.start("coordinator");
  // No merge actor yet: the pipeline waits for the merge.
  REQUIRE(p.wait_until([&] { return p.waiting_in("merge") || p.waiting_in("poll-merge"); }));
  p.stop("coordinator", SIGKILL);
  p.start("merge-actor");
  p.start("coordinator");
  p.check_shipped();
  CHECK(p.stages() == kHappyStages);
}
