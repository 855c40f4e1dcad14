// The runs over HTTP: dispatch and its repeats, reads, lists, finish and release.
#include <catch2/catch.hpp>

#include <cctype>
#include <set>

#include "tests/server/server_fixture.h"

using namespace runledger;
using runledger::testing::ServerFixture;

namespace {
// "2026-12-01T08:43:24.731Z": digits where the shape has 9.
bool is_rfc3339_utc(const std::string& text) {
  const std::string shape = "9999-99-99T99:99:99.999Z";
  if (text.size() != shape.size()) return false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == '9' ? !std::isdigit(static_cast<unsigned char>(text[i]))
                        : text[i] != shape[i]) {
      return false;
    }
  }
  return true;
}
}  // namespace

TEST_CASE("POST /v1/runs creates a run once per dispatch key, answering 201 then 200") {
  ServerFixture f;
  auto c = f.client();
  const nlohmann::json body{{"dispatch_key", "k1"},
                            {"thread_key", "t1"},
                            {"requester", "alice"},
                            {"profile", {{"model", "m"}}},
                            {"budget", {{"wall_s", 600}, {"max_steps", 20}}},
                            {"system_prompt", "be brief"},
                            {"input", {{"task", "fix it"}, {"n", 3}}}};
  const auto first = c.post("/v1/runs", body);
  REQUIRE(first.status == 201);
  const auto run = first.json();
  CHECK(run["created"] == true);
  CHECK(run["status"] == "queued");
  CHECK(run["generation"] == 0);
  CHECK(run["budget"] == nlohmann::json{{"wall_s", 600}, {"max_steps", 20}});
  CHECK(run["input"] == body["input"]);
  CHECK(run["transcript"]["seq"] == 0);
  CHECK(run["steps"] == 0);
  CHECK(is_rfc3339_utc(run["created_at"]));
  CHECK(!first.headers.at("X-Request-Id").empty());

  auto again = body;
  again["requester"] = "someone else";  // the key decides, whatever else the repeat says
  const auto second = c.post("/v1/runs", again);
  CHECK(second.status == 200);
  CHECK(second.json()["created"] == false);
  CHECK(second.json()["run_id"] == run["run_id"]);
}

TEST_CASE("an Idempotency-Key header stands for dispatch_key") {
  ServerFixture f;
  auto c = f.client();
  const std::string body = nlohmann::json{{"thread_key", "t"}, {"requester", "r"}}.dump();
  const auto first =
      c.request("POST", "/v1/runs", body, "application/json", {{"Idempotency-Key", "idem-1"}});
  REQUIRE(first.status == 201);
  CHECK(first.json()["dispatch_key"] == "idem-1");
  const auto second =
      c.request("POST", "/v1/runs", body, "application/json", {{"Idempotency-Key", "idem-1"}});
  CHECK(second.status == 200);
  CHECK(second.json()["run_id"] == first.json()["run_id"]);
}

TEST_CASE("a dispatch into a thread with a live run is 409 thread_busy naming the live run") {
  ServerFixture f;
  auto c = f.client();
  const auto live = f.dispatch(c, "a", {{"thread_key", "shared"}});
  const auto busy =
      c.post("/v1/runs", {{"dispatch_key", "b"}, {"thread_key", "shared"}, {"requester", "r"}});
  CHECK(busy.status == 409);
  CHECK(busy.code() == "thread_busy");
  CHECK(busy.json()["details"]["live_run_id"] == live);
  CHECK(busy.json()["retryable"] == false);
  CHECK(busy.json()["request_id"] == busy.headers.at("X-Request-Id"));
}

TEST_CASE("dispatch validation names the field: 422 with details.field") {
  ServerFixture f;
  auto c = f.client();
  const auto check = [&](nlohmann::json body, const std::string& field) {
    const auto answer = c.post("/v1/runs", body);
    CAPTURE(body.dump(), answer.body);
    CHECK(answer.status == 422);
    CHECK(answer.json()["details"]["field"] == field);
  };
  check({{"thread_key", "t"}, {"requester", "r"}}, "dispatch_key");
  check({{"dispatch_key", "k"}, {"requester", "r"}}, "thread_key");
  check({{"dispatch_key", "k"}, {"thread_key", "t"}, {"requester", 7}}, "requester");
  check({{"dispatch_key", "k"}, {"thread_key", "t"}, {"requester", "r"}, {"extra", 1}}, "extra");
  check({{"dispatch_key", "k"},
         {"thread_key", "t"},
         {"requester", "r"},
         {"budget", {{"wall_s", 0}, {"max_steps", 1}}}},
        "budget.wall_s");
  check({{"dispatch_key", "k"},
         {"thread_key", "t"},
         {"requester", "r"},
         {"system_prompt", "a"},
         {"system_prompt_base64", "YQ=="}},
        "system_prompt_base64");
  check({{"dispatch_key", "k"}, {"thread_key", "t"}, {"requester", "r"}, {"parent_run_id", "x"}},
        "parent_run_id");
  // Nothing was created by any of them.
  CHECK(c.get("/v1/runs?status=queued").json()["runs"].empty());
}

TEST_CASE("a system prompt in base64 is stored as its exact bytes") {
  ServerFixture f;
  auto c = f.client();
  const std::string bytes("\x00\xff prompt \x01", 11);
  const auto run = f.dispatch(c, "k", {{"system_prompt_base64", testing::base64(bytes)}});
  CHECK(f.http != nullptr);
  ledger::Ledger ledger(f.pool);
  transcript::Store store(f.pool, ledger);
  CHECK(store.system_prompt(RunId(run)) == bytes);
}

TEST_CASE("GET /v1/runs/{id} answers the run, and 404 for an unknown or malformed id") {
  ServerFixture f;
  auto c = f.client();
  const auto run = f.dispatch(c, "k");
  const auto got = c.get("/v1/runs/" + run);
  REQUIRE(got.status == 200);
  CHECK(got.json()["run_id"] == run);
  CHECK(got.json()["owner"].is_null());
  CHECK(c.get("/v1/runs/" + random_uuid()).status == 404);
  const auto bad = c.get("/v1/runs/not-a-uuid");
  CHECK(bad.status == 404);
  CHECK(bad.code() == "not_found");
}

TEST_CASE("GET /v1/runs lists by status, thread or requester, a page at a time") {
  ServerFixture f;
  auto c = f.client();
  for (int i = 0; i < 5; ++i) f.dispatch(c, "k" + std::to_string(i), {{"requester", "bob"}});
  std::set<std::string> seen;
  std::string target = "/v1/runs?requester=bob&limit=2";
  for (int pages = 0; pages < 10; ++pages) {
    const auto answer = c.get(target);
    REQUIRE(answer.status == 200);
    const auto page = answer.json();
    for (const auto& run : page["runs"]) {
      CHECK(run["steps"] == 0);
      seen.insert(run["run_id"]);
    }
    if (page["next"].is_null()) break;
    target = "/v1/runs?requester=bob&limit=2&cursor=" + page["next"].get<std::string>();
  }
  CHECK(seen.size() == 5);
  CHECK(c.get("/v1/runs?status=queued").json()["runs"].size() == 5);
  CHECK(c.get("/v1/runs?thread_key=thread-k1").json()["runs"].size() == 1);
  CHECK(c.get("/v1/runs").status == 422);
  CHECK(c.get("/v1/runs?status=queued&limit=0").json()["details"]["field"] == "limit");
  CHECK(c.get("/v1/runs?status=bogus").status == 422);
  CHECK(c.get("/v1/runs?status=queued&cursor=nonsense").status == 422);
  CHECK(c.get("/v1/runs?status=queued&color=red").json()["details"]["field"] == "color");
}

TEST_CASE("finish by the holder; the identical finish again is 200, another is 409") {
  ServerFixture f;
  auto c = f.client();
  const auto run = f.dispatch(c, "k");
  const auto [id, generation] = f.claim_one(c, "py-1");
  REQUIRE(id == run);
  const nlohmann::json finish{
      {"generation", generation}, {"status", "finished"}, {"result", {{"answer", 42}}}};
  const auto done = c.post("/v1/runs/" + run + "/finish", finish);
  REQUIRE(done.status == 200);
  CHECK(done.json()["status"] == "finished");
  CHECK(done.json()["result"] == nlohmann::json{{"answer", 42}});
  CHECK(c.post("/v1/runs/" + run + "/finish", finish).status == 200);
  auto other = finish;
  other["status"] = "failed";
  const auto refused = c.post("/v1/runs/" + run + "/finish", other);
  CHECK(refused.status == 409);
  CHECK(c.post("/v1/runs/" + run + "/finish", {{"generation", generation}, {"status", "queued"}})
            .json()["details"]["field"] == "status");
}

TEST_CASE("release hands the run back for an immediate claim by anyone") {
  ServerFixture f;
  auto c = f.client();
  const auto run = f.dispatch(c, "k");
  const auto [id, generation] = f.claim_one(c, "py-1");
  const auto released = c.post("/v1/runs/" + run + "/release", {{"generation", generation}});
  REQUIRE(released.status == 200);
  CHECK(released.json()["status"] == "queued");
  const auto [again, next] = f.claim_one(c, "py-2");
  CHECK(again == run);
  CHECK(next == generation + 1);
}

TEST_CASE("GET /healthz needs no token; /readyz checks the database") {
  ServerFixture f;
  testing::HttpClient anonymous(f.http->port());
  const auto health = anonymous.get("/healthz");
  CHECK(health.status == 200);
  CHECK(health.json()["ok"] == true);
  CHECK(anonymous.get("/readyz").status == 200);
  CHECK(anonymous.get("/v1/nothing-here").status == 404);
}
