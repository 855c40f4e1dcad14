// `runledger up` as a real process: it owns the embedded cluster and its children, survives a
// kill -9 of a predecessor, refuses a second live owner, and stops everything on Ctrl-C.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <thread>

#include "ids/ids.h"
#include "ledger/ledger.h"
#include "migrations/migrations.h"
#include "tests/support/child_process.h"
#include "tests/support/http_client.h"

using namespace runledger;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

pid_t spawn_up(const fs::path& root, bool demo = false) {
  // Port 0: tests in parallel never contend for the API's port.
  std::vector<std::string> args = {"up", "--root", root.string(), "--listen", "127.0.0.1:0"};
  if (!demo) args.push_back("--no-demo");
  return testing::spawn(RUNLEDGER_BINARY, args, {{"DATABASE_URL", std::nullopt}});
}

// The URL `up` publishes once the database is up and every migration is applied, or "" after
// `timeout`.
std::string wait_for_database(const fs::path& root, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(root / "database_url");
    std::string url;
    if (in && std::getline(in, url) && !url.empty()) {
      try {
        pqxx::connection conn(url);
        pqxx::nontransaction tx(conn);
        const auto applied = tx.exec("SELECT count(*) FROM runledger_migrations")[0][0].as<int>();
        if (applied == static_cast<int>(migrations::all().size())) return url;
      } catch (const std::exception&) {
        // not ready yet
      }
    }
    std::this_thread::sleep_for(50ms);
  }
  return "";
}

std::optional<int> wait_exit(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(20ms);
  }
  return std::nullopt;
}

// Processes whose command line mentions `needle` (e.g. the cluster's data directory).
int processes_mentioning(const std::string& needle) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(needle) != std::string::npos) ++n;
  }
  return n;
}

struct Root {
  fs::path path = fs::temp_directory_path() / ("runledger-uptest-" + random_uuid());
  ~Root() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("up survives a kill -9 of its predecessor, keeps the data, and stops cleanly") {
  Root root;
  const pid_t first = spawn_up(root.path);
  const std::string url = wait_for_database(root.path, 90s);
  REQUIRE_FALSE(url.empty());
  std::string run_id;
  {
    pg::Pool pool(url, 1);
    ledger::Ledger ledger(pool);
    ledger::DispatchRequest r;
    r.dispatch_key = "before-the-crash";
    r.thread_key = "t";
    r.requester = "test";
    run_id = ledger.dispatch(r).run.run_id.value();
  }

  // A second owner of the same root is refused while the first lives (exit code 4: conflict).
  const pid_t intruder = spawn_up(root.path);
  CHECK(wait_exit(intruder, 60s) == 4);

  kill(first, SIGKILL);
  REQUIRE(wait_exit(first, 10s).has_value());
  fs::remove(root.path / "database_url");  // stale: published by the dead owner

  const pid_t second = spawn_up(root.path);
  const std::string url2 = wait_for_database(root.path, 90s);
  REQUIRE_FALSE(url2.empty());
  {
    pg::Pool pool(url2, 1);
    ledger::Ledger ledger(pool);
    CHECK(ledger.get(RunId(run_id)).dispatch_key == "before-the-crash");
  }
  const auto pgdata = (root.path / "pgdata").string();
  CHECK(processes_mentioning(pgdata) == 1);  // one postmaster: the leftover was stopped

  kill(second, SIGINT);
  CHECK(wait_exit(second, 60s) == 0);
  CHECK(processes_mentioning(pgdata) == 0);
  CHECK_FALSE(fs::exists(root.path / "database_url"));
}

TEST_CASE("up's first start ships a chat request end to end through a bot killed on the way") {
  Root root;
  const pid_t up = spawn_up(root.path, /*demo=*/true);
  const std::string url = wait_for_database(root.path, 90s);
  REQUIRE_FALSE(url.empty());
  pqxx::connection conn(url);
  const auto shown = [&] {
    try {
      return pqxx::nontransaction(conn)
                 .exec("SELECT count(*) FROM runledger_markers WHERE name = 'demo.ship'")[0][0]
                 .as<int>() == 1;
    } catch (const pqxx::sql_error&) {
      return false;  // up is still migrating
    }
  };
  const auto until = std::chrono::steady_clock::now() + 240s;
  while (!shown() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(200ms);
  REQUIRE(shown());
  pqxx::nontransaction tx(conn);
  CHECK(
      tx.exec("SELECT status FROM wf_instances WHERE workflow = 'ship'")[0][0].as<std::string>() ==
      "complete");
  // The bot really died after the push and the run was taken over and settled.
  CHECK(tx.exec("SELECT count(*) FROM run_steps WHERE tool = 'git_push' "
                "AND settlement->>'rule' = 'synthetic_unsafe'")[0][0]
            .as<int>() == 1);
  CHECK(tx.exec("SELECT max(takeovers) FROM live_runs")[0][0].as<int>() >= 1);
  CHECK(tx.exec("SELECT count(*) FROM deploys")[0][0].as<int>() == 1);
  kill(up, SIGINT);
  CHECK(wait_exit(up, 60s) == 0);
}

TEST_CASE("up serves the API and keeps its operator token in <root>/operator.token, mode 0600") {
  Root root;
  const pid_t up = spawn_up(root.path);
  REQUIRE_FALSE(wait_for_database(root.path, 90s).empty());
  std::uint16_t port = 0;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (port == 0 && std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(root.path / "api_url");
    std::string url;
    if (in && std::getline(in, url) && !url.empty()) {
      port = static_cast<std::uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
    }
    std::this_thread::sleep_for(50ms);
  }
  REQUIRE(port != 0);
  const auto file = root.path / "operator.token";
  REQUIRE(fs::exists(file));
  CHECK((fs::status(file).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));
  std::ifstream in(file);
  std::string token;
  std::getline(in, token);
  testing::HttpClient c(port, token);
  const auto listed = c.get("/v1/runs?status=queued");
  CHECK(listed.status == 200);
  kill(up, SIGINT);
  CHECK(wait_exit(up, 60s) == 0);
}
