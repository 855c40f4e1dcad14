// `runledger demo --root DIR`: the first-start demo that `runledger up` runs once per database. A
// chat request is shipped end to end by the coordinator and bot-1 that `up` supervises (up starts
// bot-1 armed to SIGKILL itself right after the coding child's push, and restarts it: the run is
// reclaimed, the push settled as unsafe and re-checked), then the story is printed as a timeline
// read back from the database, and a marker makes it happen only once.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <spdlog/spdlog.h>

#include "cli/cli.h"
#include "cli/workflows.h"
#include "coordinator/coordinator.h"
#include "migrations/migrations.h"
#include "pg/pg.h"
#include "ship/ship.h"
#include "subprocess/subprocess.h"

namespace runledger::cli {
namespace {

namespace fs = std::filesystem;
using coordinator::json;

constexpr const char* kMarker = "demo.ship";
constexpr const char* kThread = "demo";
constexpr const char* kRequester = "demo-user";

// What happened, from the database: the thread's messages, the instance's history, its children
// (dispatched, settled steps, ends with their takeovers), in time order.
constexpr pg::Statement kTimeline{"demo_timeline", R"sql(
  SELECT to_char(at, 'HH24:MI:SS.MS'), what FROM (
    SELECT created_at AS at, 'thread    | ' || body AS what
      FROM thread_messages WHERE thread_key = $1
    UNION ALL
    SELECT h.at, 'pipeline  | ' || h.what || coalesce(' ' || h.step_key, '')
      FROM wf_history h
      WHERE h.instance_id = $2 AND h.what IN ('created', 'spawned', 'event received', 'waiting',
                                              'taken over', 'complete', 'errored')
    UNION ALL
    SELECT r.created_at, 'child run | ' || left(r.run_id::text, 8) || ' (' ||
           coalesce(r.profile->>'kind', '?') || ') dispatched'
      FROM live_runs r WHERE r.parent_instance_id = $2
    UNION ALL
    SELECT s.finished_at, 'child run | ' || left(s.run_id::text, 8) || ' step ' || s.step_no ||
           ' (' || s.tool || ') settled after a restart: ' || (s.settlement->>'rule') ||
           ', generation ' || s.result_generation
      FROM run_steps s JOIN live_runs r USING (run_id)
      WHERE r.parent_instance_id = $2 AND s.settlement IS NOT NULL
    UNION ALL
    SELECT r.finished_at, 'child run | ' || left(r.run_id::text, 8) || ' ' || r.status ||
           ' at generation ' || r.generation || ' (' || r.takeovers || ' takeover(s))'
      FROM live_runs r WHERE r.parent_instance_id = $2 AND r.finished_at IS NOT NULL
  ) t ORDER BY at, what
)sql"};

void run_checked(const std::vector<std::string>& argv, const fs::path& dir) {
  const auto child = subprocess::run_child(argv, {}, dir, 1 << 16);
  if (!child.exited || child.code != 0) {
    throw std::runtime_error(argv[0] + " " + argv[1] + " failed: " + child.output);
  }
}

}  // namespace

fs::path demo_repository(const fs::path& root) {
  return root / "ship" / "origin.git";
}
fs::path demo_deploy_root(const fs::path& root) {
  return root / "ship" / "deploys";
}

bool demo_shown(const std::string& url) {
  pg::Pool pool(url, 1);
  return migrations::marked(pool, kMarker);
}

void prepare_demo_repository(const fs::path& root) {
  const fs::path repo = demo_repository(root);
  if (fs::exists(repo / "HEAD")) return;
  fs::create_directories(repo);
  fs::create_directories(demo_deploy_root(root));
  run_checked({"git", "init", "-q", "--bare", "-b", "main", repo.string()}, root);
  const fs::path seed = root / "ship" / "seed";
  fs::remove_all(seed);
  run_checked({"git", "clone", "-q", repo.string(), seed.string()}, root);
  run_checked({"git", "-C", seed.string(), "-c", "user.name=runledger", "-c",
               "user.email=demo@runledger.invalid", "commit", "-q", "--allow-empty", "-m",
               "initial commit"},
              root);
  run_checked({"git", "-C", seed.string(), "push", "-q", "origin", "main"}, root);
  fs::remove_all(seed);
}

namespace {

int demo(const Arguments& args) {
  const fs::path root = fs::absolute(args.value("--root"));
  const std::string url = database_url();
  if (demo_shown(url)) {
    std::printf("The first-start demo ran before: `runledger threads show %s`.\n", kThread);
    return 0;
  }
  prepare_demo_repository(root);
  pg::Pool pool(url, 2);
  ship::Policy policy(pool);
  policy.grant(kRequester, "agent:run:coding");
  policy.grant(kRequester, "agent:run:review");
  const auto registry = builtin_workflows();
  coordinator::Coordinator client(pool, registry);
  const InstanceId id = ship::ship_instance_id(kThread, "first-start");
  client.create("ship", id,
                {{"thread", kThread},
                 {"message", "first-start"},
                 {"requester", kRequester},
                 {"request", "Add a SHIP file, as the first-start demo"},
                 {"review_verdicts", {"changes", "approve"}}});
  spdlog::info(
      "demo: shipping a chat request (instance {}); bot-1 will be killed with SIGKILL "
      "right after its push and restarted",
      id.value());
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  coordinator::Instance instance = client.get(id);
  while (instance.status != coordinator::InstanceStatus::complete &&
         instance.status != coordinator::InstanceStatus::errored &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    instance = client.get(id);
  }
  std::printf("\n=== first-start demo: a chat request shipped end to end ===\n");
  {
    auto conn = pool.acquire();
    pqxx::nontransaction tx(*conn);
    for (const auto& row : pg::exec(tx, kTimeline, std::string(kThread), id.value())) {
      std::printf("%s  %s\n", row[0].c_str(), row[1].c_str());
    }
  }
  migrations::mark_once(pool, kMarker);
  std::printf("result: %s %s\n", std::string(coordinator::to_string(instance.status)).c_str(),
              instance.output.dump().c_str());
  std::printf(
      "see also: runledger threads show %s | runledger instances history %s | runledger runs "
      "ls\n\n",
      kThread, id.value().c_str());
  std::fflush(stdout);
  return instance.status == coordinator::InstanceStatus::complete ? 0 : 1;
}

}  // namespace

Command demo_command() {
  return {
      .name = "demo",
      .summary = "the first-start demo: a chat request shipped end to end (once per database)",
      .description =
          "`up` runs it on the first start of a database, with the coordinator, bot-1 "
          "and merge actor it supervises; it prints the story read back from the "
          "database.",
      .options = {{.name = "--root",
                   .value = "DIR",
                   .help = "where the demo's repository is (DIR/ship/origin.git)",
                   .required = true}},
      .run = demo,
  };
}

}  // namespace runledger::cli
