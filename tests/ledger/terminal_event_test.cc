// Invariant 6, "terminal means announced": every terminal write inserts the parent instance's
// run-finished event in the same transaction, deduplicated by run id, with a NOTIFY.
#include "errors/errors.h"
#include "tests/ledger/ledger_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using ledger::RunStatus;
using namespace std::chrono_literals;

namespace {

RunId child_of(LedgerFixture& f, const std::string& key, const std::string& instance) {
  auto r = request(key);
  r.parent_instance = instance;
  return f.ledger.dispatch(r).run.run_id;
}

pqxx::result events(LedgerFixture& f, const std::string& instance) {
  pqxx::connection conn(f.db.url());
  pqxx::nontransaction tx(conn);
  return tx.exec_params(
      "SELECT event_type, dedupe_key, payload::text FROM wf_events WHERE instance_id = $1",
      instance);
}

}  // namespace

TEST_CASE("finish inserts the parent's run-finished event and notifies its channel") {
  LedgerFixture f;
  const RunId run = child_of(f, "c", "wf-1");
  const auto c = f.ledger.claim(make_owner("bot-1"), run);

  pqxx::connection listener(f.db.url());
  struct Receiver : pqxx::notification_receiver {
    using notification_receiver::notification_receiver;
    void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
    std::vector<std::string> payloads;
  } receiver(listener, "runledger_wf_events");

  f.ledger.finish(run, c.run.generation, RunStatus::finished, {{"pr", 42}});
  const auto rows = events(f, "wf-1");
  REQUIRE(rows.size() == 1);
  CHECK(rows[0][0].as<std::string>() == "run-finished");
  CHECK(rows[0][1].as<std::string>() == "run-finished:" + run.value());
  const auto payload = nlohmann::json::parse(rows[0][2].as<std::string>());
  CHECK(payload["run_id"] == run.value());
  CHECK(payload["status"] == "finished");
  CHECK(payload["result"]["pr"] == 42);

  listener.await_notification(5, 0);
  REQUIRE(receiver.payloads.size() == 1);
  CHECK(receiver.payloads[0] == "wf-1");
}

TEST_CASE("the same finish repeated is a no-op, and a different finish after it is a Conflict") {
  LedgerFixture f;
  const RunId run = child_of(f, "c", "wf-2");
  const auto c = f.ledger.claim(make_owner("bot-1"), run);
  f.ledger.finish(run, c.run.generation, RunStatus::failed, {{"error", "boom"}});
  f.ledger.finish(run, c.run.generation, RunStatus::failed, {{"error", "boom"}});
  CHECK_THROWS_AS(f.ledger.finish(run, c.run.generation, RunStatus::finished, {{"ok", true}}),
                  Conflict);
  CHECK_THROWS_AS(f.ledger.finish(run, c.run.generation, RunStatus::failed, {{"error", "other"}}),
                  Conflict);
  CHECK(events(f, "wf-2").size() == 1);  // announced once
  CHECK_THROWS_AS(f.ledger.finish(run, c.run.generation, RunStatus::running, nullptr),
                  InvalidArgument);
}

TEST_CASE("an operator's cancel announces the run too, queued or running") {
  LedgerFixture f;
  const RunId queued = child_of(f, "q", "wf-3");
  const RunId running = child_of(f, "r", "wf-3");
  f.ledger.claim(make_owner("bot-1"), running);
  f.ledger.cancel(queued, "operator");
  f.ledger.cancel(running, "operator");
  const auto rows = events(f, "wf-3");
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    CHECK(nlohmann::json::parse(row[2].as<std::string>())["status"] == "cancelled");
  }
}

TEST_CASE("any terminal write announces, even one made outside the ledger API") {
  LedgerFixture f;
  const RunId run = child_of(f, "x", "wf-4");
  f.ledger.claim(make_owner("bot-1"), run);
  // E.g. a future reclaim path or a hand-written repair: the trigger still announces.
  f.sql(
      "UPDATE live_runs SET status = 'interrupted', finished_at = now(), lease_expires_at = NULL "
      "WHERE run_id = '" +
      run.value() + "'");
  const auto rows = events(f, "wf-4");
  REQUIRE(rows.size() == 1);
  CHECK(nlohmann::json::parse(rows[0][2].as<std::string>())["status"] == "interrupted");
}

TEST_CASE("a run without a parent instance announces nothing") {
  LedgerFixture f;
  const RunId run = f.dispatch("solo");
  const auto c = f.ledger.claim(make_owner("bot-1"), run);
  f.ledger.finish(run, c.run.generation, RunStatus::finished, nullptr);
  CHECK(f.sql("SELECT count(*) FROM wf_events")[0][0].as<int>() == 0);
}

TEST_CASE("a terminal write and its event commit or roll back together") {
  LedgerFixture f;
  const RunId run = child_of(f, "t", "wf-5");
  f.ledger.claim(make_owner("bot-1"), run);
  {
    pqxx::connection conn(f.db.url());
    pqxx::work tx(conn);
    tx.exec_params(
        "UPDATE live_runs SET status = 'failed', finished_at = now(), "
        "lease_expires_at = NULL WHERE run_id = $1::uuid",
        run.value());
    CHECK(tx.exec("SELECT count(*) FROM wf_events")[0][0].as<int>() == 1);
    tx.abort();
  }
  CHECK(f.sql("SELECT count(*) FROM wf_events")[0][0].as<int>() == 0);
  CHECK(f.ledger.get(run).status == RunStatus::running);
}
