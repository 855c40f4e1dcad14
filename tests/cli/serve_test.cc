// `runledger serve` as a real process: it announces where it listens, and SIGTERM lets the
// request in flight finish before it exits 0.
#include <signal.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "ids/ids.h"
#include "tests/support/child_process.h"
#include "tests/support/http_client.h"
#include "tests/support/test_database.h"
#include "tokens/tokens.h"

using namespace runledger;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

struct Root {
  fs::path path = fs::temp_directory_path() / ("runledger-servetest-" + random_uuid());
  ~Root() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// The port in <root>/api_url once serve wrote it, or 0 after `timeout`.
std::uint16_t wait_for_api(const fs::path& root, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(root / "api_url");
    std::string url;
    if (in && std::getline(in, url) && !url.empty()) {
      return static_cast<std::uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
    }
    std::this_thread::sleep_for(50ms);
  }
  return 0;
}

}  // namespace

// The signal finds the I/O threads with no socket operation pending (the long-poll's is done):
// its answer is still written, well within the grace.
TEST_CASE("serve on SIGTERM finishes the request in flight, then exits 0") {
  testing::TestDatabase db;
  pg::Pool pool(db.pool_options(2));
  tokens::Tokens admin(pool);
  const std::string token = admin.create(tokens::Scope::bot, "bot", std::nullopt).token;
  Root root;
  const pid_t serve = testing::spawn(
      RUNLEDGER_BINARY,
      {"serve", "--listen", "127.0.0.1:0", "--root", root.path.string(), "--grace-ms", "5000"},
      {{"DATABASE_URL", db.url()}});
  const std::uint16_t port = wait_for_api(root.path, 60s);
  REQUIRE(port != 0);
  testing::HttpClient c(port, token);
  REQUIRE(c.get("/healthz").status == 200);

  // A long-polling claim is in flight when the signal comes: its incarnation is recorded (its
  // first look found nothing; it waits, or is about to).
  const std::string incarnation = random_uuid();
  auto in_flight = std::async(std::launch::async, [&] {
    testing::HttpClient mine(port, token);
    return mine.post("/v1/runs/claim",
                     {{"slot", "py-1"}, {"incarnation", incarnation}, {"wait_ms", 20'000}});
  });
  const auto seen_by = std::chrono::steady_clock::now() + 30s;
  for (bool seen = false; !seen && std::chrono::steady_clock::now() < seen_by;) {
    auto conn = pool.acquire();
    pqxx::nontransaction tx(*conn);
    seen = !tx.exec_params("SELECT 1 FROM http_slots WHERE incarnation = $1::uuid", incarnation)
                .empty();
    if (!seen) std::this_thread::sleep_for(20ms);
  }
  const auto signalled = std::chrono::steady_clock::now();
  kill(serve, SIGTERM);
  const auto answer = in_flight.get();
  CHECK(answer.status == 200);
  CHECK(answer.json()["runs"].empty());
  CHECK(testing::wait_exit(serve) == 0);
  CHECK(std::chrono::steady_clock::now() - signalled < 4s);  // not the 5 s grace
  CHECK_FALSE(fs::exists(root.path / "api_url"));
}
