// The write-ahead record over HTTP: turns, intents, completions, settlement, and every write
// repeated after a lost answer returning the first answer.
#include <catch2/catch.hpp>

#include "tests/server/server_fixture.h"

using namespace runledger;
using runledger::testing::base64;
using runledger::testing::Held;
using runledger::testing::HttpClient;
using runledger::testing::ServerFixture;

namespace {

// Writes the intent of step `n` (tool `tool`, call "c<n>", args {"n": n}).
testing::HttpAnswer intent(HttpClient& c, const Held& h, int n, const std::string& tool) {
  return c.post(h.path() + "/steps", {{"generation", h.generation},
                                      {"step_no", n},
                                      {"tool", tool},
                                      {"call_id", "c" + std::to_string(n)},
                                      {"args", {{"n", n}}}});
}

}  // namespace

TEST_CASE(
    "a turn writes the assistant entry and its intents in one call; a repeat answers the same") {
  ServerFixture f;
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  const nlohmann::json turn{
      {"generation", h.generation},
      {"expected_seq", 1},
      {"body_base64", base64("{\"role\":\"assistant\"}")},
      {"intents",
       {{{"step_no", 1}, {"tool", "read_file"}, {"call_id", "c1"}, {"args", {{"p", "a"}}}},
        {{"step_no", 2}, {"tool", "bash"}, {"call_id", "c2"}, {"args", {{"cmd", "ls"}}}}}}};
  const auto first = c.post(h.path() + "/turns", turn);
  REQUIRE(first.status == 200);
  CHECK(first.json()["seq"] == 1);
  CHECK(first.json()["effect_keys"] == nlohmann::json{h.run + "/1", h.run + "/2"});
  const auto repeat = c.post(h.path() + "/turns", turn);
  CHECK(repeat.status == 200);
  CHECK(repeat.body == first.body);
  auto other = turn;
  other["body_base64"] = base64("another turn");
  const auto conflict = c.post(h.path() + "/turns", other);
  CHECK(conflict.status == 409);
  CHECK(conflict.code() == "conflict");
  CHECK(c.get(h.path()).json()["transcript"]["seq"] == 1);
  CHECK(c.get(h.path()).json()["steps"] == 2);
}

TEST_CASE("an intent answers its effect key and class; the same intent again the same key") {
  ServerFixture f;
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  const nlohmann::json intent{{"generation", h.generation},
                              {"step_no", 1},
                              {"tool", "write_x"},
                              {"call_id", "c1"},
                              {"args", {{"a", 1}}}};
  const auto first = c.post(h.path() + "/steps", intent);
  REQUIRE(first.status == 200);
  CHECK(first.json() ==
        nlohmann::json{{"effect_key", h.run + "/1"}, {"effect_class", "idempotent"}});
  CHECK(c.post(h.path() + "/steps", intent).body == first.body);
  auto other = intent;
  other["tool"] = "bash";
  CHECK(c.post(h.path() + "/steps", other).status == 409);
  other["tool"] = "unlisted_tool";
  other["step_no"] = 2;
  CHECK(c.post(h.path() + "/steps", other).json()["effect_class"] == "unsafe");
}

TEST_CASE("an intent past the budget is 409 budget_exhausted and the run is finished failed") {
  ServerFixture f;
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c, {{"budget", {{"wall_s", 600}, {"max_steps", 1}}}});
  const auto over = c.post(h.path() + "/steps", {{"generation", h.generation},
                                                 {"step_no", 2},
                                                 {"tool", "bash"},
                                                 {"call_id", "c2"},
                                                 {"args", nlohmann::json::object()}});
  CHECK(over.status == 409);
  CHECK(over.code() == "budget_exhausted");
  CHECK(c.get(h.path()).json()["status"] == "failed");
}

TEST_CASE("a completion with its tool_result entry is one call; the identical one again is 200") {
  ServerFixture f;
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  REQUIRE(intent(c, h, 1, "bash").status == 200);
  const nlohmann::json completion{{"generation", h.generation},
                                  {"result", {{"exit", 0}, {"out", "ok"}}},
                                  {"tool_result_base64", base64("tool said ok")}};
  const auto done = c.post(h.path() + "/steps/1/complete", completion);
  REQUIRE(done.status == 200);
  CHECK(done.json()["state"] == "done");
  CHECK(done.json()["result_seq"] == 1);
  CHECK(c.post(h.path() + "/steps/1/complete", completion).status == 200);
  CHECK(c.get(h.path()).json()["transcript"]["seq"] == 1);  // no second entry
  auto other = completion;
  other["result"] = "different";
  CHECK(c.post(h.path() + "/steps/1/complete", other).status == 409);
  CHECK(c.post(h.path() + "/steps/1/complete",
               {{"generation", h.generation}, {"result", 1}, {"error", "x"}})
            .json()["details"]["field"] == "result");
  CHECK(c.post(h.path() + "/steps/9/complete", completion).status == 404);
  const auto steps = c.get(h.path() + "/steps").json()["steps"];
  REQUIRE(steps.size() == 1);
  CHECK(steps[0]["state"] == "done");
  CHECK(steps[0]["effect_class"] == "unsafe");
  CHECK(steps[0]["intent_generation"] == h.generation);
}

TEST_CASE("a write under a generation that lost the run is 409 fenced, not retryable") {
  ServerFixture f;
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  // An operator cancels it: the generation moves on.
  ledger::Ledger ledger(f.pool);
  ledger.cancel(RunId(h.run), "test");
  const auto answer =
      c.post(h.path() + "/transcript",
             {{"generation", h.generation}, {"kind", "user"}, {"body_base64", base64("late")}});
  CHECK(answer.status == 409);
  CHECK(answer.code() == "fenced");
  CHECK(answer.json()["retryable"] == false);
}

TEST_CASE("appends by expected_seq: a repeat answers the first answer, another entry is 409") {
  ServerFixture f;
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  const nlohmann::json append{{"generation", h.generation},
                              {"expected_seq", 1},
                              {"kind", "user"},
                              {"body_base64", base64("hello")}};
  const auto first = c.post(h.path() + "/transcript", append);
  REQUIRE(first.status == 200);
  CHECK(first.json()["seq"] == 1);
  CHECK(first.json()["sha256"].get<std::string>().size() == 64);
  CHECK(c.post(h.path() + "/transcript", append).body == first.body);
  auto other = append;
  other["body_base64"] = base64("goodbye");
  CHECK(c.post(h.path() + "/transcript", other).status == 409);
  auto gap = append;
  gap["expected_seq"] = 5;
  CHECK(c.post(h.path() + "/transcript", gap).status == 409);
  // Raw bytes, the fields in the query.
  const std::string raw("\x00\x01 raw \xff", 9);
  const auto sent = c.request("POST",
                              h.path() + "/transcript?generation=" + std::to_string(h.generation) +
                                  "&kind=user&expected_seq=2",
                              raw, "application/octet-stream");
  REQUIRE(sent.status == 200);
  CHECK(sent.json()["seq"] == 2);
  const auto entry = c.get(h.path() + "/transcript/2");
  CHECK(entry.status == 200);
  CHECK(entry.body == raw);
  CHECK(entry.headers.at("X-Entry-Kind") == "user");
  CHECK(c.get(h.path() + "/transcript/3").status == 404);
  const auto page = c.get(h.path() + "/transcript?from=1&limit=1").json();
  REQUIRE(page["entries"].size() == 1);
  CHECK(page["entries"][0]["body_base64"] == base64("hello"));
  CHECK(page["next"] == 2);
  const auto last = c.get(h.path() + "/transcript?from=2").json();
  CHECK(last["entries"][0]["body_base64"] == base64(raw));
  CHECK(last["next"].is_null());
  CHECK(c.get(h.path() + "/verify").json()["ok"] == true);
}

TEST_CASE("a tool_result entry names its step and is linked to it; a repeat answers the same") {
  ServerFixture f;
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  REQUIRE(intent(c, h, 1, "bash").status == 200);
  REQUIRE(c.post(h.path() + "/steps/1/complete", {{"generation", h.generation}, {"result", "ok"}})
              .status == 200);
  const nlohmann::json append{{"generation", h.generation},
                              {"kind", "tool_result"},
                              {"step_no", 1},
                              {"body_base64", base64("result of c1")}};
  const auto first = c.post(h.path() + "/transcript", append);
  REQUIRE(first.status == 200);
  CHECK(c.post(h.path() + "/transcript", append).body == first.body);
  CHECK(c.get(h.path() + "/steps").json()["steps"][0]["result_seq"] == first.json()["seq"]);
}

TEST_CASE(
    "settle after a takeover: unsafe in flight settled, pure handed back, a second settle finds "
    "nothing") {
  ServerFixture f;
  auto c = f.client();
  const Held h = f.dispatch_and_claim(c);
  REQUIRE(intent(c, h, 1, "read_file").status == 200);
  REQUIRE(c.post(h.path() + "/steps/1/complete", {{"generation", h.generation}, {"result", "text"}})
              .status == 200);  // done, but its tool_result never reached the transcript
  REQUIRE(intent(c, h, 2, "bash").status == 200);       // unsafe, in flight
  REQUIRE(intent(c, h, 3, "read_file").status == 200);  // pure, in flight
  // The bot dies; its next incarnation takes the run at once.
  const auto [run, generation] = f.claim_one(c, "py-1");
  REQUIRE(run == h.run);
  const auto settled = c.post(h.path() + "/settle", {{"generation", generation}});
  REQUIRE(settled.status == 200);
  const auto s = settled.json();
  CAPTURE(s.dump());
  CHECK(s["interrupted"] == false);
  REQUIRE(s["settled"].size() == 2);
  CHECK(s["settled"][0] == nlohmann::json{{"step_no", 1},
                                          {"rule", "append_missing_result"},
                                          {"effect_key", h.run + "/1"}});
  CHECK(s["settled"][1]["rule"] == "synthetic_unsafe");
  REQUIRE(s["rerun"].size() == 1);
  CHECK(s["rerun"][0]["step_no"] == 3);
  CHECK(s["rerun"][0]["rule"] == "rerun_pure");
  CHECK(s["rerun"][0]["args"] == nlohmann::json{{"n", 3}});
  // The synthetic result, in its documented shape.
  const auto entries = c.get(h.path() + "/transcript").json()["entries"];
  REQUIRE(entries.size() == 2);
  ledger::Ledger ledger(f.pool);
  transcript::Store store(f.pool, ledger);
  const auto synthetic = nlohmann::json::parse(
      store.last_entry(RunId(h.run), transcript::EntryKind::tool_result)->body);
  CHECK(synthetic["type"] == "tool_result");
  CHECK(synthetic["synthetic"] == true);
  CHECK(synthetic["call_id"] == "c2");
  CHECK(synthetic["effect_key"] == h.run + "/2");
  // A second settle settles nothing; the pure call is still the bot's to run.
  const auto again = c.post(h.path() + "/settle", {{"generation", generation}}).json();
  CHECK(again["settled"].empty());
  CHECK(again["rerun"].size() == 1);
  // The bot re-runs it under its generation.
  const auto rerun = c.post(
      h.path() + "/steps/3/complete",
      {{"generation", generation}, {"result", "again"}, {"tool_result_base64", base64("again")}});
  REQUIRE(rerun.status == 200);
  CHECK(rerun.json()["result_generation"] == generation);
  CHECK(rerun.json()["settlement"]["rule"] == "rerun_pure");
  CHECK(c.post(h.path() + "/settle", {{"generation", generation}}).json()["rerun"].empty());
  CHECK(c.post(h.path() + "/settle", {{"generation", h.generation}}).code() == "fenced");
}

TEST_CASE("settle finishes a run interrupted when it was taken over too often without progress") {
  auto options = ServerFixture::fast_options();
  options.settlement.max_takeovers_without_progress = 2;
  ServerFixture f(options);
  auto c = f.client();
  f.dispatch(c, "k");
  std::int64_t generation = 0;
  std::string run;
  for (int i = 0; i < 3; ++i) std::tie(run, generation) = f.claim_one(c, "py-1");
  const auto settled = c.post("/v1/runs/" + run + "/settle", {{"generation", generation}});
  REQUIRE(settled.status == 200);
  CHECK(settled.json()["interrupted"] == true);
  CHECK(c.get("/v1/runs/" + run).json()["status"] == "interrupted");
}
