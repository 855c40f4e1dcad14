// `runledger demo --root DIR`: the first-start demo that `runledger up` runs once per database. A
// chat request is shipped end to end by the coordinator and bot-1 that `up` supervises (up starts
// bot-1 armed to SIGKILL itself right after the coding child's push, and restarts it: the run is
// reclaimed, the push settled as unsafe and re-checked), then the story is printed as a timeline
// read back from the database, and a marker makes it happen only once.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string_view>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "cli/cli.h"
#include "cli/workflows.h"
#include "coordinator/coordinator.h"
#include "ledger/ledger.h"
#include "migrations/migrations.h"
#include "paging/paging.h"
#include "pg/pg.h"
#include "ship/ship.h"
#include "subprocess/subprocess.h"
#include "transcript/transcript.h"

namespace runledger::cli {
namespace {

namespace fs = std::filesystem;
using coordinator::json;

constexpr const char* kMarker = "demo.ship";
constexpr const char* kThread = "demo";
constexpr const char* kRequester = "demo-user";

// One line of the demo's story: when, as PostgreSQL prints a timestamptz (the pool's sessions
// are in UTC) with the fraction padded to six digits, so that comparing the texts compares the
// times; and what.
struct StoryLine {
  std::string at;  // "YYYY-MM-DD HH:MM:SS.ffffff"
  std::string what;
  auto operator<=>(const StoryLine&) const = default;
};

// PostgreSQL drops a fraction's trailing zeros ("12:34:56.5+00", "12:34:56+00").
std::string microsecond_time(std::string_view timestamptz) {
  constexpr std::size_t kSecondsEnd = 19;  // "YYYY-MM-DD HH:MM:SS"
  std::string fraction;
  if (timestamptz.size() > kSecondsEnd && timestamptz[kSecondsEnd] == '.') {
    const auto digits = timestamptz.substr(kSecondsEnd + 1);
    fraction = digits.substr(0, digits.find_first_not_of("0123456789"));
  }
  fraction.resize(6, '0');
  return std::string(timestamptz.substr(0, kSecondsEnd)) + "." + fraction;
}

// The child's profile's "kind" as text, "?" when it has none.
std::string kind_of(const json& profile) {
  const auto kind = profile.find("kind");
  if (kind == profile.end() || kind->is_null()) return "?";
  return kind->is_string() ? kind->get<std::string>() : kind->dump();
}

// What happened, read back through the owning modules: the thread's messages, the instance's
// history, its child runs (dispatched, steps settled after a restart, ends with their takeovers),
// in time order (ties by text).
std::vector<StoryLine> story(pg::Pool& pool, coordinator::Coordinator& client,
                             const InstanceId& instance) {
  std::vector<StoryLine> lines;
  const auto add = [&](std::string_view at, std::string what) {
    lines.push_back({microsecond_time(at), std::move(what)});
  };
  ship::ThreadOutbox outbox(pool);
  for (const auto& message : paging::all_pages(
           [&](const paging::PageRequest& page) { return outbox.messages(kThread, page); })) {
    add(message.created_at, "thread    | " + message.body);
  }
  static const std::set<std::string, std::less<>> kPipelineEvents = {
      "created", "spawned", "event received", "waiting", "taken over", "complete", "errored"};
  for (const auto& entry : client.history(instance)) {
    if (!kPipelineEvents.contains(entry.what)) continue;
    add(entry.at, "pipeline  | " + entry.what + (entry.step_key ? " " + *entry.step_key : ""));
  }
  ledger::Ledger ledger(pool);
  transcript::Store store(pool, ledger);
  ledger::RunFilter children;
  children.parent_instance = instance.value();
  children.limit = 1000;  // the pipeline spawns a handful
  for (const auto& run : ledger.list(children)) {
    const std::string child = "child run | " + run.run_id.value().substr(0, 8);
    add(run.created_at, child + " (" + kind_of(run.profile) + ") dispatched");
    for (const auto& step : paging::all_pages([&](const paging::PageRequest& page) {
           return store.step_timeline(run.run_id, page);
         })) {
      // A settlement completes its step: it has a result generation and a finish time.
      if (step.settlement.is_null()) continue;
      add(step.finished_at.value(),
          child + " step " + std::to_string(step.step_no.value()) + " (" + step.tool +
              ") settled after a restart: " + step.settlement.value("rule", "?") + ", generation " +
              std::to_string(step.result_generation.value().value()));
    }
    if (run.finished_at) {
      add(*run.finished_at, child + " " + std::string(ledger::to_string(run.status)) +
                                " at generation " + std::to_string(run.generation.value()) + " (" +
                                std::to_string(run.takeovers) + " takeover(s))");
    }
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

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
  for (const auto& line : story(pool, client, id)) {
    std::printf("%s  %s\n", line.at.substr(11, 12).c_str(), line.what.c_str());  // HH:MM:SS.mmm
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
