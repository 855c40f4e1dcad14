// The ledger's paged reads: runs by status, thread and requester, newest first, and the counts
// by status.
#include "errors/errors.h"
#include "ledger/statements.h"  // private: the plans of the paged statements
#include "tests/ledger/ledger_fixture.h"
#include "tests/support/pages.h"

#include <algorithm>

using namespace runledger;
using namespace runledger::testing;
using ledger::RunStatus;

namespace {

// A run staged with SQL (tests may set up tables directly): finished, so that any number share a
// thread, and created `tick` microseconds after a fixed instant, so that the test knows the order.
struct Staged {
  std::int64_t tick;
  std::string run_id;
};

constexpr const char* kInstant = "2030-01-01 00:00:00.123456+00";

Staged stage(const LedgerFixture& f, const std::string& key, std::int64_t tick,
             const std::string& run_id = "") {
  const auto rows = f.sql(
      "INSERT INTO live_runs (run_id, dispatch_key, thread_key, requester, status, finished_at, "
      "budget_wall_s, budget_max_steps, created_at) VALUES (coalesce(" +
      (run_id.empty() ? std::string("NULL") : "'" + run_id + "'") +
      "::uuid, gen_random_uuid()), '" + key +
      "', 'shared-thread', 'bob', 'finished', now(), 60, 10, timestamptz '" + kInstant + "' + " +
      std::to_string(tick) + " * interval '1 microsecond') RETURNING run_id");
  return {tick, rows[0][0].as<std::string>()};
}

// Newest first: by tick, then run id (uuid order is the order of its lowercase hex text).
void sort_newest_first(std::vector<Staged>& runs) {
  std::sort(runs.begin(), runs.end(), [](const Staged& a, const Staged& b) {
    return a.tick != b.tick ? a.tick > b.tick : a.run_id > b.run_id;
  });
}

std::vector<std::string> ids(const std::vector<Staged>& runs) {
  std::vector<std::string> out;
  for (const auto& r : runs) out.push_back(r.run_id);
  return out;
}

std::string run_id_of(const ledger::Run& run) {
  return run.run_id.value();
}

}  // namespace

TEST_CASE("runs_with_status, runs_in_thread and runs_of_requester list their runs, newest first") {
  LedgerFixture f;
  const auto owner = make_owner("bot-1");
  const RunId a = f.dispatch("a");
  const RunId b = f.dispatch("b");
  auto by_carol = request("c");
  by_carol.requester = "carol";
  const RunId c = f.ledger.dispatch(by_carol).run.run_id;
  f.ledger.claim(owner, a);
  const auto page = [](int limit) { return paging::PageRequest{std::nullopt, limit}; };

  const auto queued = f.ledger.runs_with_status(RunStatus::queued, page(10));
  REQUIRE(queued.items.size() == 2);
  CHECK(queued.items[0].run_id == c);  // the newest first
  CHECK(queued.items[1].run_id == b);
  CHECK_FALSE(queued.next_cursor);
  const auto running = f.ledger.runs_with_status(RunStatus::running, page(10));
  REQUIRE(running.items.size() == 1);
  CHECK(running.items[0].run_id == a);
  CHECK(running.items[0].status == RunStatus::running);
  CHECK(f.ledger.runs_with_status(RunStatus::failed, page(10)).items.empty());

  const auto in_thread = f.ledger.runs_in_thread("thread-b", page(10));
  REQUIRE(in_thread.items.size() == 1);
  CHECK(in_thread.items[0].run_id == b);
  CHECK(f.ledger.runs_in_thread("no-such-thread", page(10)).items.empty());

  const auto of_alice = f.ledger.runs_of_requester("alice", page(10));
  REQUIRE(of_alice.items.size() == 2);
  CHECK(of_alice.items[0].run_id == b);
  CHECK(of_alice.items[1].run_id == a);
  const auto of_carol = f.ledger.runs_of_requester("carol", page(1));
  REQUIRE(of_carol.items.size() == 1);
  CHECK(of_carol.items[0].run_id == c);
  CHECK_FALSE(of_carol.next_cursor);  // a full page that is also the last has no cursor
}

TEST_CASE("pages of runs come in order, none repeated or skipped, when runs share a created_at") {
  LedgerFixture f;
  std::vector<Staged> runs;
  // Groups of three share a microsecond; neighbouring groups are one microsecond apart.
  for (int i = 0; i < 23; ++i) runs.push_back(stage(f, "run-" + std::to_string(i), i / 3));
  sort_newest_first(runs);
  for (const int limit : {1, 2, 3, 4, 7, 23, 1000}) {
    INFO("limit " << limit);
    const paging::PageRequest first{std::nullopt, limit};
    const auto fetch_status = [&](const paging::PageRequest& p) {
      return f.ledger.runs_with_status(RunStatus::finished, p);
    };
    const auto fetch_thread = [&](const paging::PageRequest& p) {
      return f.ledger.runs_in_thread("shared-thread", p);
    };
    const auto fetch_requester = [&](const paging::PageRequest& p) {
      return f.ledger.runs_of_requester("bob", p);
    };
    CHECK(keys_of(read_pages(fetch_status, first), run_id_of) == ids(runs));
    CHECK(keys_of(read_pages(fetch_thread, first), run_id_of) == ids(runs));
    CHECK(keys_of(read_pages(fetch_requester, first), run_id_of) == ids(runs));
  }
}

TEST_CASE("runs inserted between two pages do not shift the pages") {
  LedgerFixture f;
  std::vector<Staged> runs;
  for (int i = 0; i < 12; ++i) runs.push_back(stage(f, "run-" + std::to_string(i), i / 2));
  sort_newest_first(runs);
  const auto first = f.ledger.runs_in_thread("shared-thread", {std::nullopt, 5});
  REQUIRE(first.next_cursor);
  const auto before = ids(runs);
  CHECK(keys_of(std::vector<std::vector<ledger::Run>>{first.items}, run_id_of) ==
        std::vector(before.begin(), before.begin() + 5));
  const Staged last_seen = runs[4];

  // Newer than the page's last run, by time or by the tie-break: never listed after it. Older by
  // the tie-break: it belongs after the cursor, in its place.
  stage(f, "newest", 1000);
  stage(f, "tie-newer", last_seen.tick, "ffffffff-ffff-ffff-ffff-ffffffffffff");
  runs.push_back(stage(f, "tie-older", last_seen.tick, "00000000-0000-0000-0000-000000000000"));
  sort_newest_first(runs);

  const auto rest = read_pages(
      [&](const paging::PageRequest& p) { return f.ledger.runs_in_thread("shared-thread", p); },
      {first.next_cursor, 5});
  const auto after = ids(runs);
  CHECK(keys_of(rest, run_id_of) == std::vector(after.begin() + 5, after.end()));
}

TEST_CASE("a bad cursor, a bad limit or a malformed key is refused") {
  LedgerFixture f;
  for (int i = 0; i < 3; ++i) stage(f, "run-" + std::to_string(i), i);
  const auto in_thread = f.ledger.runs_in_thread("shared-thread", {std::nullopt, 1});
  REQUIRE(in_thread.next_cursor);
  // A cursor is its listing's only.
  CHECK_THROWS_AS(f.ledger.runs_of_requester("bob", {in_thread.next_cursor, 1}), InvalidArgument);
  CHECK_THROWS_AS(f.ledger.runs_with_status(RunStatus::finished, {in_thread.next_cursor, 1}),
                  InvalidArgument);
  CHECK_THROWS_AS(f.ledger.runs_in_thread("shared-thread", {"bm90IGEgY3Vyc29y", 1}),
                  InvalidArgument);
  CHECK_THROWS_AS(f.ledger.runs_in_thread("shared-thread", {"", 1}), InvalidArgument);
  for (const int limit : {0, -1, 1001}) {
    CHECK_THROWS_AS(f.ledger.runs_in_thread("shared-thread", {std::nullopt, limit}),
                    InvalidArgument);
    CHECK_THROWS_AS(f.ledger.runs_with_status(RunStatus::queued, {std::nullopt, limit}),
                    InvalidArgument);
    CHECK_THROWS_AS(f.ledger.runs_of_requester("bob", {std::nullopt, limit}), InvalidArgument);
  }
  CHECK_THROWS_AS(f.ledger.runs_in_thread("", {}), InvalidArgument);
  CHECK_THROWS_AS(f.ledger.runs_of_requester(std::string(256, 'x'), {}), InvalidArgument);
}

TEST_CASE("count_by_status counts the runs of each status some run has, in lifecycle order") {
  LedgerFixture f;
  CHECK(f.ledger.count_by_status().empty());
  const auto owner = make_owner("bot-1");
  f.ledger.cancel(f.dispatch("cancelled"), "op");
  f.dispatch("queued-1");
  f.dispatch("queued-2");
  f.ledger.claim(owner, f.dispatch("running"));
  const auto counts = f.ledger.count_by_status();
  REQUIRE(counts.size() == 3);
  CHECK(counts[0].status == RunStatus::queued);
  CHECK(counts[0].runs == 2);
  CHECK(counts[1].status == RunStatus::running);
  CHECK(counts[1].runs == 1);
  CHECK(counts[2].status == RunStatus::cancelled);
  CHECK(counts[2].runs == 1);
}

TEST_CASE("a page of runs is one index scan from the cursor, in the generic plan too") {
  LedgerFixture f;
  // Staged with SQL: 20,000 runs over 40 threads, 40 requesters and every status.
  f.sql(
      "INSERT INTO live_runs (dispatch_key, thread_key, requester, status, finished_at, "
      "budget_wall_s, budget_max_steps) "
      "SELECT 'bulk-' || i, 'thread-' || (i % 40), 'requester-' || (i % 40), "
      "(ARRAY['finished', 'failed', 'interrupted', 'cancelled'])[1 + i % 4], now(), 60, 10 "
      "FROM generate_series(1, 20000) i");
  f.sql("ANALYZE live_runs");
  const std::string after = "(extract(epoch FROM now()) * 1000000)::bigint, gen_random_uuid(), 101";
  struct Listing {
    const pg::Statement& statement;
    std::string key;
    std::string index;
  };
  for (const Listing& l :
       {Listing{ledger::sql::kRunsWithStatus, "'failed'", "live_runs_by_status_created"},
        Listing{ledger::sql::kRunsInThread, "'thread-7'", "live_runs_by_thread_created"},
        Listing{ledger::sql::kRunsOfRequester, "'requester-7'",
                "live_runs_by_requester_created"}}) {
    for (const bool generic : {true, false}) {
      for (const std::string& position : {after, std::string("NULL, NULL, 101")}) {
        const std::string plan =
            plan_of(f.db.url(), l.statement.sql, l.key + ", " + position, generic);
        INFO(plan);
        CHECK(plan.find("Index Scan Backward using " + l.index) != std::string::npos);
        CHECK(plan.find("Sort") == std::string::npos);
        CHECK(plan.find("Index Cond: ((") != std::string::npos);
        CHECK(plan.find("ROW(created_at, run_id) <") != std::string::npos);
      }
    }
  }
}
