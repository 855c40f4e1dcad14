// `runledger up`: the foreground supervisor. It owns the embedded cluster (unless DATABASE_URL
// points elsewhere) and every process it starts (service, coordinator, bot-1, merge actor, and
// once per database the first-start demo); those die with it (PR_SET_PDEATHSIG), and Ctrl-C or
// SIGTERM stops them all, then the cluster.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "cli/cli.h"
#include "cluster/cluster.h"
#include "migrations/migrations.h"
#include "subprocess/subprocess.h"
#include "tokens/tokens.h"

namespace runledger::cli {
namespace {

// A child of the supervisor: this executable again, dying with it (even after a kill -9 of it).
subprocess::Child start_child(const std::vector<std::string>& argv, const std::string& url,
                              const std::vector<std::pair<std::string, std::string>>& env = {}) {
  subprocess::Spawn child(argv);
  child.program = "/proc/self/exe";
  child.env = {{"DATABASE_URL", url}};
  for (const auto& [name, value] : env) child.env.emplace_back(name, value);
  child.death_signal = SIGTERM;
  return subprocess::spawn(child);
}

// On a database's first start (no live token named "operator"), an operator token for the API,
// kept in <root>/operator.token (0600): the one place it is shown.
void ensure_operator_token(const std::string& url, const std::filesystem::path& root) {
  pg::Pool pool(url, 1);
  tokens::Tokens tokens(pool);
  const auto file = root / "operator.token";
  for (const auto& token : tokens.list()) {
    if (token.name == "operator" && !token.revoked_at) {
      if (!std::filesystem::exists(file)) {
        spdlog::warn(
            "the operator token is not in {}; `runledger token create --scope operator` "
            "makes another",
            file.string());
      }
      return;
    }
  }
  const auto created = tokens.create(tokens::Scope::operator_scope, "operator", std::nullopt);
  std::filesystem::create_directories(root);
  write_private_file(file, created.token);
}

int up(const Arguments& args) {
  const auto root_flag = args.text("--root");
  const std::filesystem::path root = command_root(root_flag);
  const std::string listen = args.value("--listen");

  // Signals are taken synchronously by sigwaitinfo below; children start with none blocked.
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGCHLD);
  sigprocmask(SIG_BLOCK, &handled, nullptr);

  auto db = std::make_unique<AttachedDatabase>(root);
  const std::string url = db->url();
  migrations::apply(url);  // logs what it applies
  ensure_operator_token(url, root);

  // The processes of a working installation: the service, a coordinator running the ship
  // pipeline on a local repository, a bot, and the merge actor standing in for the person who
  // merges. On a database that has not shown it yet, the first-start demo ships a chat request
  // through them, with bot-1 armed to SIGKILL itself right after the coding child's push (the
  // restart below reclaims the run); `--no-demo` skips it.
  const bool no_demo = args.given("--no-demo");
  const std::filesystem::path ship_root =
      root_flag ? std::filesystem::absolute(root) : std::filesystem::current_path() / ".runledger";
  prepare_demo_repository(ship_root);
  const bool demo = !no_demo && !demo_shown(url);
  // Each child is restarted when it exits, with a backoff of its own, except one-shot ones;
  // `first_env` applies to its first start only.
  struct Supervised {
    std::vector<std::string> argv;
    bool restart = true;
    std::vector<std::pair<std::string, std::string>> first_env = {};
    std::optional<subprocess::Child> process = {};
    std::chrono::seconds backoff{1};
  };
  const std::string repo = demo_repository(ship_root).string();
  std::vector<Supervised> children;  // filled one by one: a Child is not copyable
  children.push_back({{"runledger", "service"}});
  children.push_back({{"runledger", "serve", "--listen", listen, "--root", root.string()}});
  children.push_back({{"runledger", "coordinator", "--ship-repo", repo, "--deploy-root",
                       demo_deploy_root(ship_root).string(), "--merge-poll-ms", "5000"}});
  children.push_back(
      {{"runledger", "bot", "--slot", "bot-1", "--work-dir", (ship_root / "bot-1").string()},
       true,
       demo ? std::vector<std::pair<std::string, std::string>>{{"RUNLEDGER_FAILPOINTS",
                                                                "bot.after_effect=kill@4"}}
            : std::vector<std::pair<std::string, std::string>>{}});
  children.push_back({{"runledger", "merge-actor", "--ship-repo", repo, "--delay-ms", "1000"}});
  if (demo) children.push_back({{"runledger", "demo", "--root", ship_root.string()}, false});
  for (auto& c : children) {
    c.process = start_child(c.argv, url, c.first_env);
    spdlog::info("supervising {} (pid {})", c.argv[1], c.process->pid());
  }
  spdlog::info("the API: {} (for bots: README, The HTTP API); operator token in {}",
               listen.ends_with(":0") ? "see " + (root / "api_url").string() : "http://" + listen,
               (root / "operator.token").string());
  spdlog::info("Ctrl-C stops everything");

  for (;;) {
    siginfo_t info;
    const int sig = sigwaitinfo(&handled, &info);
    if (sig == SIGINT || sig == SIGTERM) break;
    if (sig != SIGCHLD) continue;
    for (auto& c : children) {
      if (!c.process) continue;
      const auto exit = c.process->wait_for(std::chrono::milliseconds(0));
      if (!exit) continue;
      c.process.reset();
      if (!c.restart) continue;
      spdlog::warn("{} exited ({}); restarting in {} s", c.argv[1], exit->to_string(),
                   c.backoff.count());
      std::this_thread::sleep_for(c.backoff);
      c.backoff = std::min(c.backoff * 2, std::chrono::seconds(30));
      c.process = start_child(c.argv, url);
    }
  }

  spdlog::info("stopping");
  for (auto& c : children) {
    if (c.process) c.process->kill(SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (auto& c : children) {
    if (!c.process) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    c.process->wait_for(std::max(left, std::chrono::milliseconds(0)));
    c.process.reset();  // one still running is killed with SIGKILL (and reaped)
  }
  db.reset();  // stops the embedded cluster, if it is ours
  spdlog::info("stopped");
  return 0;
}

}  // namespace

Command up_command() {
  return {
      .name = "up",
      .summary =
          "start the embedded PostgreSQL (unless DATABASE_URL is set), migrate, and "
          "supervise the service, a coordinator running ship, bot-1 and a merge actor "
          "until Ctrl-C; the first start of a database runs the demo",
      .options = {{.name = "--root",
                   .value = "DIR",
                   .help = "the directory of the embedded cluster and the demo's repository "
                           "(by default the cluster is in ./.runledger/pg, or "
                           "/var/lib/runledger/<hash> when run as root, the rest in "
                           "./.runledger)"},
                  {.name = "--listen",
                   .value = "ADDRESS:PORT",
                   .help = "where `serve`, the HTTP API, listens",
                   .fallback = "127.0.0.1:8080"},
                  {.name = "--no-demo", .help = "skip the first-start demo"}},
      .run = up,
  };
}

}  // namespace runledger::cli
