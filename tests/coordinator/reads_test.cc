// The coordinator's paged reads: instances newest first (all, by status, by workflow) and an
// instance's history oldest first, with cursors that neither repeat nor skip a row.
#include <set>
#include <vector>

#include "coordinator/statements.h"  // private: the plans of the paged statements
#include "errors/errors.h"
#include "paging/paging.h"
#include "tests/coordinator/coordinator_fixture.h"
#include "tests/support/pages.h"

using namespace runledger;
using namespace runledger::testing;
using coordinator::InstanceStatus;

namespace {

void add_noop(CoordinatorFixture& f, const std::string& name) {
  f.add(name, [](const json&, coordinator::Step&) { return json(true); });
}

template <class Fetch>
std::vector<std::string> ids_page_by_page(Fetch fetch, int limit) {
  std::vector<std::string> ids;
  paging::PageRequest page{std::nullopt, limit};
  for (;;) {
    const auto got = fetch(page);
    REQUIRE(got.items.size() <= static_cast<std::size_t>(limit));
    for (const auto& i : got.items) ids.push_back(i.instance_id.value());
    if (!got.next_cursor) return ids;
    page.cursor = got.next_cursor;
  }
}

}  // namespace

TEST_CASE("instances page newest first; ties in created_at are broken by id, none repeated") {
  CoordinatorFixture f;
  add_noop(f, "w");
  for (const char* id : {"a", "b", "c", "d", "e"}) f.create("w", id);
  // Test setup: b, c and d share one creation time, as a batch's instances do.
  f.sql(
      "UPDATE wf_instances SET created_at = (SELECT created_at FROM wf_instances "
      "WHERE instance_id = 'c') WHERE instance_id IN ('b', 'd')");
  const auto ids =
      ids_page_by_page([&](const auto& page) { return f.client().instances(page); }, 2);
  CHECK(ids == std::vector<std::string>{"e", "d", "c", "b", "a"});
}

TEST_CASE("an instance created between two page reads does not shift the pages") {
  CoordinatorFixture f;
  add_noop(f, "w");
  for (const char* id : {"a", "b", "c", "d"}) f.create("w", id);
  const auto first = f.client().instances({std::nullopt, 2});
  REQUIRE(first.next_cursor);
  f.create("w", "z");  // newest: before the cursor, so not on the pages after it
  const auto second = f.client().instances({first.next_cursor, 2});
  REQUIRE(second.items.size() == 2);
  CHECK(second.items[0].instance_id.value() == "b");
  CHECK(second.items[1].instance_id.value() == "a");
  CHECK_FALSE(second.next_cursor);
}

TEST_CASE("instances by status and by workflow list only theirs") {
  CoordinatorFixture f;
  add_noop(f, "w1");
  add_noop(f, "w2");
  f.create("w1", "one");
  f.create("w2", "two");
  f.create("w1", "three");
  auto executor = f.executor();
  REQUIRE(executor->run_one());  // the oldest due instance ("one") completes
  const auto of_w1 = ids_page_by_page(
      [&](const auto& page) { return f.client().instances_of_workflow("w1", page); }, 1);
  CHECK(of_w1 == std::vector<std::string>{"three", "one"});
  const auto complete = ids_page_by_page(
      [&](const auto& page) {
        return f.client().instances_with_status(InstanceStatus::complete, page);
      },
      10);
  CHECK(complete == std::vector<std::string>{"one"});
  const auto queued = ids_page_by_page(
      [&](const auto& page) {
        return f.client().instances_with_status(InstanceStatus::queued, page);
      },
      1);
  CHECK(queued == std::vector<std::string>{"three", "two"});
}

TEST_CASE("a page of instances is an index scan from the cursor, never a sort of them all") {
  CoordinatorFixture f;
  // Staged with SQL: 20,000 instances of 4 workflows, neither queued nor running, and 100
  // queued ones, the newest, as a backlog a claim has not reached yet.
  f.sql(
      "INSERT INTO wf_instances (instance_id, workflow, version, input, status, wake_at, "
      "deadline_at, created_at) "
      "SELECT 'bulk-' || i, 'w' || (i % 4), 1, '{}', "
      "(ARRAY['waiting', 'paused', 'complete', 'errored', 'terminated'])[1 + i % 5], "
      "now() + interval '1 day', now() + interval '1 day', "
      "now() - (20000 - i) * interval '1 second' "
      "FROM generate_series(1, 20000) i");
  f.sql(
      "INSERT INTO wf_instances (instance_id, workflow, version, input, deadline_at) "
      "SELECT 'queued-' || i, 'w1', 1, '{}', now() + interval '1 day' "
      "FROM generate_series(1, 100) i");
  f.sql("ANALYZE wf_instances");
  const std::string after = "(extract(epoch FROM now()) * 1000000)::bigint, 'bulk-5', 101";
  struct Listing {
    const pg::Statement& statement;
    std::string key;  // with its comma, or empty
    std::string index;
  };
  for (const Listing& l :
       {Listing{coordinator::sql::kInstances, "", "wf_instances_by_created"},
        Listing{coordinator::sql::kInstancesAtRest, "'errored', ",
                "wf_instances_by_status_created"},
        Listing{coordinator::sql::kInstancesOfWorkflow, "'w2', ", "wf_instances_by_created"}}) {
    for (const bool generic : {true, false}) {
      for (const std::string& position : {after, std::string("NULL, NULL, 101")}) {
        const std::string plan = plan_of(f.db.url(), l.statement.sql, l.key + position, generic);
        INFO(l.statement.name << "\n" << plan);
        // A status's generic plan, which a prepared statement keeps only when it costs about
        // what the custom plans did (plan_cache_mode auto), may be the backward scan of all
        // instances with the status as a filter: the planner cannot tell a rare status there.
        const bool either = generic && l.index == "wf_instances_by_status_created";
        CHECK(plan.find("Index Scan Backward using " +
                        (either ? "wf_instances_by_" : l.index + " ")) != std::string::npos);
        CHECK(plan.find("Sort") == std::string::npos);
        CHECK(plan.find("ROW(created_at, instance_id) <") != std::string::npos);
      }
    }
  }
  // Active instances (here: queued), which the status index leaves out, come from an index: the
  // backward scan of wf_instances_by_created, or the active instances of wf_instances_due and a
  // sort of the queued among them, whichever the planner finds cheaper; never every instance.
  for (const bool generic : {true, false}) {
    for (const std::string& position : {after, std::string("NULL, NULL, 101")}) {
      const std::string plan = plan_of(f.db.url(), coordinator::sql::kInstancesActive.sql,
                                       "'queued', " + position, generic);
      INFO(plan);
      CHECK(plan.find("Seq Scan") == std::string::npos);
      CHECK((plan.find("Index Scan Backward using wf_instances_by_created ") != std::string::npos ||
             plan.find("Index Scan on wf_instances_due") != std::string::npos));
    }
  }
}

TEST_CASE("a cursor of another listing, a made-up cursor and a bad limit are refused") {
  CoordinatorFixture f;
  add_noop(f, "w");
  for (const char* id : {"a", "b", "c"}) f.create("w", id);
  const auto all = f.client().instances({std::nullopt, 1});
  REQUIRE(all.next_cursor);
  CHECK_THROWS_AS(f.client().instances_of_workflow("w", {all.next_cursor, 1}), InvalidArgument);
  CHECK_THROWS_AS(f.client().instances({std::string("not-a-cursor"), 1}), InvalidArgument);
  CHECK_THROWS_AS(f.client().history(InstanceId("a"), {all.next_cursor, 1}), InvalidArgument);
  CHECK_THROWS_AS(f.client().instances({std::nullopt, 0}), InvalidArgument);
  CHECK_THROWS_AS(f.client().instances({std::nullopt, 1001}), InvalidArgument);
}

TEST_CASE("an instance's history pages oldest first and adds up to all of it") {
  CoordinatorFixture f;
  f.add("steps", [](const json&, coordinator::Step& step) {
    for (int i = 0; i < 5; ++i) step.run("s", [](std::stop_token) { return json(1); });
    return json(true);
  });
  f.create("steps", "h");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  const auto all = f.client().history(InstanceId("h"));
  REQUIRE(all.size() >= 7);  // created, claimed, five steps, completed
  std::vector<std::int64_t> paged;
  paging::PageRequest page{std::nullopt, 3};
  for (;;) {
    const auto got = f.client().history(InstanceId("h"), page);
    for (const auto& h : got.items) paged.push_back(h.id);
    if (!got.next_cursor) break;
    page.cursor = got.next_cursor;
  }
  std::vector<std::int64_t> ids;
  for (const auto& h : all) ids.push_back(h.id);
  CHECK(paged == ids);
  CHECK(std::set<std::int64_t>(ids.begin(), ids.end()).size() == ids.size());
  CHECK(std::is_sorted(ids.begin(), ids.end()));
  CHECK_THROWS_AS(f.client().history(InstanceId("nobody"), {std::nullopt, 10}), NotFound);
}

TEST_CASE("an operator's expire_waits times a wait out on the next replay, in the history") {
  CoordinatorFixture f;
  f.add("waiter", [](const json&, coordinator::Step& step) {
    try {
      return step.wait_for_event("approval", {"approve", json::object(), std::chrono::hours(1)});
    } catch (const coordinator::EventTimeout&) {
      return json("timed out");
    }
  });
  f.create("waiter", "w");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK(f.status("w") == InstanceStatus::waiting);
  CHECK(f.client().expire_waits(InstanceId("w"), "approval", "alice") == 1);
  REQUIRE(executor->run_one());
  const auto done = f.client().get(InstanceId("w"));
  CHECK(done.status == InstanceStatus::complete);
  CHECK(done.output == json("timed out"));
  bool recorded = false;
  for (const auto& h : f.client().history(InstanceId("w"))) {
    recorded = recorded || (h.what == "waits expired" && h.detail.value("by", "") == "alice");
  }
  CHECK(recorded);
  CHECK_THROWS_AS(f.client().expire_waits(InstanceId("nobody"), "approval", "alice"), NotFound);
}
