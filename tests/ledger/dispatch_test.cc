#include "errors/errors.h"
#include "tests/ledger/ledger_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using ledger::RunStatus;

TEST_CASE("dispatch creates a queued run at generation 0 with the default budget") {
  LedgerFixture f;
  auto r = request("k1");
  r.profile = {{"kind", "coding"}, {"script", {1, 2, 3}}};
  const auto d = f.ledger.dispatch(r);
  CHECK(d.created);
  CHECK(d.run.status == RunStatus::queued);
  CHECK(d.run.generation == Generation(0));
  CHECK(d.run.profile == r.profile);
  CHECK(d.run.budget.wall_s == f.ledger.options().default_budget.wall_s);
  CHECK(d.run.depth == 0);
  CHECK_FALSE(d.run.owner.has_value());
  CHECK(f.ledger.get(d.run.run_id).dispatch_key == "k1");
}

TEST_CASE("the same dispatch key returns the same run with created = false") {
  LedgerFixture f;
  const auto first = f.ledger.dispatch(request("same"));
  auto again = request("same");
  again.thread_key = "another-thread";  // whatever else the retry says
  const auto second = f.ledger.dispatch(again);
  CHECK_FALSE(second.created);
  CHECK(second.run.run_id == first.run.run_id);
  CHECK(second.run.thread_key == first.run.thread_key);
}

TEST_CASE("the same dispatch key still returns its run after the run finished") {
  LedgerFixture f;
  const auto first = f.ledger.dispatch(request("done"));
  const auto claim = f.ledger.claim(make_owner("bot-1"), first.run.run_id);
  f.ledger.finish(claim.run.run_id, claim.run.generation, RunStatus::finished, {{"ok", true}});
  const auto again = f.ledger.dispatch(request("done"));
  CHECK_FALSE(again.created);
  CHECK(again.run.status == RunStatus::finished);
}

TEST_CASE("concurrent dispatches of one key create exactly one run") {
  LedgerFixture f({}, 8);
  std::vector<std::thread> threads;
  std::vector<std::string> ids(8);
  std::vector<int> created(8, 0);
  std::vector<std::string> errors(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      try {
        const auto d = f.ledger.dispatch(request("race"));
        ids[i] = d.run.run_id.value();
        created[i] = d.created;
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) CHECK(e.empty());
  CHECK(std::count(created.begin(), created.end(), 1) == 1);
  CHECK(std::all_of(ids.begin(), ids.end(), [&](const auto& id) { return id == ids[0]; }));
}

TEST_CASE("a second live run in a thread is a Conflict naming the live run") {
  LedgerFixture f;
  auto a = request("a");
  a.thread_key = "T";
  const auto live = f.ledger.dispatch(a);
  auto b = request("b");
  b.thread_key = "T";
  try {
    f.ledger.dispatch(b);
    FAIL("expected a Conflict");
  } catch (const Conflict& e) {
    CHECK(e.details()["live_run_id"] == live.run.run_id.value());
  }
  // Once the live run ends, the thread takes a new one.
  const auto c = f.ledger.claim(make_owner("bot-1"), live.run.run_id);
  f.ledger.finish(live.run.run_id, c.run.generation, RunStatus::finished, nullptr);
  CHECK(f.ledger.dispatch(b).created);
}

TEST_CASE("dispatch refuses bad keys with InvalidArgument and stores nothing") {
  LedgerFixture f;
  const std::vector<std::string> bad = {
      "",         std::string(256, 'k'), "tab\there", std::string("nul\0x", 5),
      "bell\x07", "\xff\xfe not utf-8",  "del\x7f"};
  for (const auto& key : bad) {
    auto r = request("ok");
    r.dispatch_key = key;
    CHECK_THROWS_AS(f.ledger.dispatch(r), InvalidArgument);
    auto t = request("ok2");
    t.thread_key = key;
    CHECK_THROWS_AS(f.ledger.dispatch(t), InvalidArgument);
  }
  auto r = request(std::string(255, 'k'));  // exactly 255 bytes is fine
  r.thread_key = std::string(255, 't');
  CHECK(f.ledger.dispatch(r).created);
  CHECK(f.sql("SELECT count(*) FROM live_runs")[0][0].as<int>() == 1);
}

TEST_CASE("dispatch refuses a non-object profile, an oversized profile and bad budgets") {
  ledger::Options o;
  o.max_profile_bytes = 1024;
  LedgerFixture f(o);
  auto r = request("p");
  r.profile = nlohmann::json::array({1, 2});
  CHECK_THROWS_AS(f.ledger.dispatch(r), InvalidArgument);
  r.profile = {{"big", std::string(2000, 'x')}};
  CHECK_THROWS_AS(f.ledger.dispatch(r), InvalidArgument);
  r.profile = nlohmann::json::object();
  r.budget = ledger::Budget{0, 10};
  CHECK_THROWS_AS(f.ledger.dispatch(r), InvalidArgument);
  r.budget = ledger::Budget{60, o.max_budget.max_steps + 1};
  CHECK_THROWS_AS(f.ledger.dispatch(r), InvalidArgument);
  r.budget = ledger::Budget{60, 5};
  const auto d = f.ledger.dispatch(r);
  CHECK(d.run.budget.wall_s == 60);
  CHECK(d.run.budget.max_steps == 5);
}

TEST_CASE("children have depth 1 and children of children are refused") {
  LedgerFixture f;
  const RunId parent = f.dispatch("parent");
  auto child = request("child");
  child.parent_run = parent;
  const auto c = f.ledger.dispatch(child);
  CHECK(c.run.depth == 1);
  CHECK(c.run.parent_run == parent);
  auto grandchild = request("grandchild");
  grandchild.parent_run = c.run.run_id;
  CHECK_THROWS_AS(f.ledger.dispatch(grandchild), Conflict);

  auto of_instance = request("of-instance");
  of_instance.parent_instance = "ship:thread-1:msg-9";
  CHECK(f.ledger.dispatch(of_instance).run.depth == 1);

  auto unknown_parent = request("orphan");
  unknown_parent.parent_run = RunId(random_uuid());
  CHECK_THROWS_AS(f.ledger.dispatch(unknown_parent), NotFound);

  auto bad_instance = request("bad-instance");
  bad_instance.parent_instance = "has space";
  CHECK_THROWS_AS(f.ledger.dispatch(bad_instance), InvalidArgument);
}

TEST_CASE("a parent's live children are capped, and a retried dispatch past the cap succeeds") {
  ledger::Options o;
  o.max_live_children = 2;
  LedgerFixture f(o);
  auto child = [&](const std::string& key) {
    auto r = request(key);
    r.parent_instance = "wf-1";
    return r;
  };
  const auto first = f.ledger.dispatch(child("c1"));
  f.ledger.dispatch(child("c2"));
  CHECK_THROWS_AS(f.ledger.dispatch(child("c3")), Conflict);
  CHECK_FALSE(f.ledger.dispatch(child("c1")).created);  // the retry finds its run
  // A child that ended frees its place.
  const auto c = f.ledger.claim(make_owner("bot-1"), first.run.run_id);
  f.ledger.finish(first.run.run_id, c.run.generation, RunStatus::finished, nullptr);
  CHECK(f.ledger.dispatch(child("c3")).created);
}

TEST_CASE("get and claim of an unknown run are NotFound") {
  LedgerFixture f;
  const RunId unknown(random_uuid());
  CHECK_THROWS_AS(f.ledger.get(unknown), NotFound);
  CHECK_THROWS_AS(f.ledger.claim(make_owner("bot-1"), unknown), NotFound);
  CHECK_THROWS_AS(f.ledger.finish(unknown, Generation(1), RunStatus::finished, nullptr), NotFound);
  CHECK_THROWS_AS(f.ledger.cancel(unknown, "op"), NotFound);
  CHECK_THROWS_AS(RunId::parse("not-a-uuid"), InvalidArgument);
}

TEST_CASE("list filters by status and thread, newest first") {
  LedgerFixture f;
  const RunId a = f.dispatch("a");
  f.dispatch("b");
  f.ledger.claim(make_owner("bot-1"), a);
  ledger::RunFilter running;
  running.status = RunStatus::running;
  const auto rows = f.ledger.list(running);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].run_id == a);
  ledger::RunFilter by_thread;
  by_thread.thread_key = "thread-b";
  CHECK(f.ledger.list(by_thread).size() == 1);
  CHECK(f.ledger.list({}).size() == 2);
  ledger::RunFilter bad;
  bad.limit = 0;
  CHECK_THROWS_AS(f.ledger.list(bad), InvalidArgument);
}
