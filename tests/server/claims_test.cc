// Claims and heartbeats over HTTP: HTTP slots, supersession, long-polls, no run given twice.
#include <catch2/catch.hpp>

#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "tests/server/server_fixture.h"

using namespace runledger;
using namespace std::chrono_literals;
using runledger::testing::HttpClient;
using runledger::testing::ServerFixture;

namespace {

nlohmann::json claim(HttpClient& c, const std::string& slot, const std::string& incarnation,
                     int max = 1, int wait_ms = 0) {
  const auto answer =
      c.post("/v1/runs/claim",
             {{"slot", slot}, {"incarnation", incarnation}, {"max", max}, {"wait_ms", wait_ms}});
  if (answer.status != 200) return {{"status", answer.status}, {"code", answer.code()}};
  return answer.json();
}

}  // namespace

TEST_CASE("a claim answers runs with their generation and lease; a heartbeat extends them") {
  ServerFixture f;
  auto c = f.client();
  const auto run = f.dispatch(c, "k");
  const std::string incarnation = random_uuid();
  const auto claimed = claim(c, "py-1", incarnation);
  REQUIRE(claimed["runs"].size() == 1);
  CHECK(claimed["runs"][0]["run_id"] == run);
  CHECK(claimed["runs"][0]["generation"] == 1);
  CHECK(claimed["runs"][0]["reclaimed"] == false);
  const auto got = c.get("/v1/runs/" + run).json();
  CHECK(got["owner"]["slot"] == "py-1");
  CHECK(got["owner"]["via"] == "http");
  CHECK(got["owner"]["incarnation"] == incarnation);

  const auto beat = c.post(
      "/v1/leases/heartbeat",
      {{"incarnation", incarnation},
       {"runs",
        {{{"run_id", run}, {"generation", 1}}, {{"run_id", random_uuid()}, {"generation", 1}}}}});
  REQUIRE(beat.status == 200);
  CHECK(beat.json()["lost"].size() == 1);
  CHECK(beat.json()["lease_expires_at"].is_string());
}

TEST_CASE("an incarnation given as 32 hex digits is the same incarnation") {
  ServerFixture f;
  auto c = f.client();
  std::string dashed = random_uuid();
  std::string hex = dashed;
  hex.erase(std::remove(hex.begin(), hex.end(), '-'), hex.end());
  CHECK(claim(c, "py-1", dashed)["runs"].empty());
  f.dispatch(c, "k");
  CHECK(claim(c, "py-1", hex)["runs"].size() == 1);  // not a new incarnation: no supersession
  CHECK(claim(c, "py-1", dashed).contains("runs"));
  CHECK(claim(c, "py-1", "not-a-uuid")["status"] == 422);
}

TEST_CASE(
    "a new incarnation of a slot takes its runs at once and the old one is refused for good") {
  ServerFixture f;
  auto c = f.client();
  const auto run = f.dispatch(c, "k");
  const std::string old_incarnation = random_uuid();
  REQUIRE(claim(c, "py-1", old_incarnation)["runs"].size() == 1);
  // The bot restarts (kill -9): its lease is 30 s, but its successor need not wait for it.
  const auto started = std::chrono::steady_clock::now();
  const std::string new_incarnation = random_uuid();
  const auto taken = claim(c, "py-1", new_incarnation);
  CHECK(std::chrono::steady_clock::now() - started < 1s);
  REQUIRE(taken["runs"].size() == 1);
  CHECK(taken["runs"][0]["run_id"] == run);
  CHECK(taken["runs"][0]["generation"] == 2);
  CHECK(taken["runs"][0]["reclaimed"] == true);

  CHECK(claim(c, "py-1", old_incarnation)["code"] == "superseded");
  const auto beat =
      c.post("/v1/leases/heartbeat",
             {{"incarnation", old_incarnation}, {"runs", {{{"run_id", run}, {"generation", 1}}}}});
  CHECK(beat.status == 409);
  CHECK(beat.code() == "superseded");
  // Its writes are fenced whatever it tries.
  const auto finish = c.post("/v1/runs/" + run + "/finish",
                             {{"generation", 1}, {"status", "finished"}, {"result", nullptr}});
  CHECK(finish.status == 409);
  CHECK(finish.code() == "fenced");
  CHECK(finish.json()["retryable"] == false);
}

TEST_CASE("a superseded incarnation's open long-poll is answered superseded at once") {
  ServerFixture f;
  auto c = f.client();
  const std::string old_incarnation = random_uuid();
  REQUIRE(claim(c, "py-1", old_incarnation)["runs"].empty());
  auto open = std::async(std::launch::async, [&] {
    auto mine = f.client();
    const auto t0 = std::chrono::steady_clock::now();
    auto answer = claim(mine, "py-1", old_incarnation, 1, 20'000);
    return std::make_pair(answer, std::chrono::steady_clock::now() - t0);
  });
  std::this_thread::sleep_for(300ms);  // the long-poll is waiting (nothing to claim)
  CHECK(claim(c, "py-1", random_uuid()).contains("runs"));
  const auto [answer, took] = open.get();
  CHECK(answer["code"] == "superseded");
  CHECK(took < 5s);
}

TEST_CASE("an HTTP claim never takes over the runs of a database slot of the same name") {
  ServerFixture f;
  auto c = f.client();
  const auto run = f.dispatch(c, "k");
  ledger::Ledger ledger(f.pool);
  const ledger::Owner database_bot{SlotName("py-1"), IncarnationId(random_uuid())};
  REQUIRE(ledger.claim_next(database_bot, 1).size() == 1);
  CHECK(claim(c, "py-1", random_uuid())["runs"].empty());
  CHECK(ledger.get(RunId(run)).owner->incarnation == database_bot.incarnation);
}

TEST_CASE("16 concurrent claimers are never given one run twice") {
  ServerFixture f;
  auto c = f.client();
  constexpr int kRuns = 40;
  for (int i = 0; i < kRuns; ++i) f.dispatch(c, "k" + std::to_string(i));
  std::mutex mu;
  std::multiset<std::string> given;
  std::vector<std::thread> claimers;
  for (int i = 0; i < 16; ++i) {
    claimers.emplace_back([&, i] {
      auto mine = f.client();
      const std::string incarnation = random_uuid();
      for (int round = 0; round < 10; ++round) {
        const auto answer = claim(mine, "claimer-" + std::to_string(i), incarnation, 2);
        std::lock_guard lock(mu);
        for (const auto& run : answer["runs"]) given.insert(run["run_id"].get<std::string>());
      }
    });
  }
  for (auto& t : claimers) t.join();
  CHECK(given.size() == kRuns);
  CHECK(std::set<std::string>(given.begin(), given.end()).size() == kRuns);
}

TEST_CASE("one dispatch wakes one waiting long-poll, at once") {
  auto options = ServerFixture::fast_options();
  options.claim_poll = 20s;  // only the notification can wake them within the test
  ServerFixture f(options);
  auto c = f.client();
  constexpr int kWaiters = 4;
  using Clock = std::chrono::steady_clock;
  struct Answered {
    nlohmann::json answer;
    Clock::duration took;
    Clock::time_point at;
  };
  std::vector<std::future<Answered>> polls;
  for (int i = 0; i < kWaiters; ++i) {
    polls.push_back(std::async(std::launch::async, [&f, i] {
      auto mine = f.client();
      const auto t0 = Clock::now();
      auto answer = claim(mine, "waiter-" + std::to_string(i), random_uuid(), 1, 3'000);
      return Answered{answer, Clock::now() - t0, Clock::now()};
    }));
  }
  std::this_thread::sleep_for(500ms);  // all four are waiting
  const auto dispatched_at = Clock::now();
  f.dispatch(c, "k");
  int got = 0;
  for (auto& p : polls) {
    const Answered a = p.get();
    if (a.answer["runs"].size() == 1) {
      ++got;
      // Woken by the dispatch's notification: no poll runs within the test.
      CHECK(a.at - dispatched_at < 1s);
    } else {
      CHECK(a.answer["runs"].empty());
      CHECK(a.took >= 2'900ms);  // the others waited out their wait_ms
    }
  }
  CHECK(got == 1);
}
