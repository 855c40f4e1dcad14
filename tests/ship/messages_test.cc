// A thread's messages, newest first, a page at a time (ThreadOutbox::messages).
#include <catch2/catch.hpp>

#include <algorithm>

#include "errors/errors.h"
#include "ship/ship.h"
#include "ship/statements.h"  // private: the plan of the page's statement
#include "tests/support/pages.h"
#include "tests/support/test_database.h"

using namespace runledger;
using namespace runledger::testing;

namespace {

// A message staged with SQL (tests may set up tables directly), posted `tick` microseconds after
// a fixed instant, so that any number share a created_at.
struct Staged {
  std::int64_t tick;
  std::int64_t id;
};

Staged stage(const TestDatabase& db, const std::string& thread, std::int64_t tick,
             std::optional<std::int64_t> id = std::nullopt) {
  pqxx::connection conn(db.url());
  pqxx::nontransaction tx(conn);
  const auto rows = tx.exec(
      "INSERT INTO thread_messages (id, thread_key, dedupe_key, body, created_at) VALUES (" +
      (id ? std::to_string(*id) : std::string("nextval('thread_messages_id_seq')")) + ", " +
      tx.quote(thread) +
      ", gen_random_uuid()::text, 'message', "
      "timestamptz '2030-01-01 00:00:00.654321+00' + " +
      std::to_string(tick) + " * interval '1 microsecond') RETURNING id");
  return {tick, rows[0][0].as<std::int64_t>()};
}

std::vector<std::int64_t> newest_first(std::vector<Staged> messages) {
  std::sort(messages.begin(), messages.end(), [](const Staged& a, const Staged& b) {
    return a.tick != b.tick ? a.tick > b.tick : a.id > b.id;
  });
  std::vector<std::int64_t> out;
  for (const auto& m : messages) out.push_back(m.id);
  return out;
}

struct OutboxFixture {
  TestDatabase db;
  pg::Pool pool{db.pool_options(2)};
  ship::ThreadOutbox outbox{pool};
};

std::int64_t id_of(const ship::ThreadMessage& m) {
  return m.id;
}

}  // namespace

TEST_CASE("a thread's messages come newest first, with what was posted") {
  OutboxFixture f;
  f.outbox.post("thread-1", "a", "first");
  f.outbox.post("thread-2", "a", "elsewhere");
  f.outbox.post("thread-1", "b", "second");
  const auto page = f.outbox.messages("thread-1", {std::nullopt, 10});
  CHECK_FALSE(page.next_cursor);
  REQUIRE(page.items.size() == 2);
  CHECK(page.items[0].body == "second");
  CHECK(page.items[0].dedupe_key == "b");
  CHECK(page.items[0].thread_key == "thread-1");
  CHECK_FALSE(page.items[0].created_at.empty());
  CHECK(page.items[1].body == "first");
  CHECK(f.outbox.messages("no-such-thread", {}).items.empty());
}

TEST_CASE("pages of messages come in order, none repeated or skipped, when messages share a time") {
  OutboxFixture f;
  std::vector<Staged> messages;
  for (int i = 0; i < 23; ++i) messages.push_back(stage(f.db, "t", i / 3));
  stage(f.db, "another-thread", 5);
  const auto fetch = [&](const paging::PageRequest& p) { return f.outbox.messages("t", p); };
  for (const int limit : {1, 2, 3, 4, 7, 23, 1000}) {
    INFO("limit " << limit);
    CHECK(keys_of(read_pages(fetch, {std::nullopt, limit}), id_of) == newest_first(messages));
  }
}

TEST_CASE("messages posted between two pages do not shift the pages") {
  OutboxFixture f;
  std::vector<Staged> messages;
  for (int i = 0; i < 12; ++i) messages.push_back(stage(f.db, "t", i / 2));
  const auto before = newest_first(messages);
  const auto first = f.outbox.messages("t", {std::nullopt, 5});
  REQUIRE(first.next_cursor);
  CHECK(keys_of(std::vector<std::vector<ship::ThreadMessage>>{first.items}, id_of) ==
        std::vector(before.begin(), before.begin() + 5));
  const Staged last_seen = *std::find_if(messages.begin(), messages.end(),
                                         [&](const Staged& m) { return m.id == before[4]; });

  // Newer than the page's last message, by time or by the tie-break: never listed after it.
  // Older by the tie-break: it belongs after the cursor, in its place.
  f.outbox.post("t", "posted-now", "newest");
  stage(f.db, "t", 1000);
  stage(f.db, "t", last_seen.tick, 1'000'000);
  messages.push_back(stage(f.db, "t", last_seen.tick, 0));

  const auto after = newest_first(messages);
  const auto rest =
      read_pages([&](const paging::PageRequest& p) { return f.outbox.messages("t", p); },
                 {first.next_cursor, 5});
  // The message posted now is dated by the real clock, before 2030: the oldest of all.
  auto expected = std::vector(after.begin() + 5, after.end());
  const auto listed = keys_of(rest, id_of);
  REQUIRE_FALSE(listed.empty());
  CHECK(f.outbox.messages("t", {std::nullopt, 1000}).items.back().body == "newest");
  CHECK(std::vector(listed.begin(), listed.end() - 1) == expected);
}

TEST_CASE("messages refuse a bad cursor and a bad limit") {
  OutboxFixture f;
  for (int i = 0; i < 3; ++i) stage(f.db, "t", i);
  const auto first = f.outbox.messages("t", {std::nullopt, 1});
  REQUIRE(first.next_cursor);
  CHECK(f.outbox.messages("t", {first.next_cursor, 1}).items.size() == 1);
  CHECK_THROWS_AS(f.outbox.messages("t", {"eyJ4Ijox", 1}), InvalidArgument);
  CHECK_THROWS_AS(f.outbox.messages("t", {first.next_cursor->substr(1), 1}), InvalidArgument);
  for (const int limit : {0, 1001}) {
    CHECK_THROWS_AS(f.outbox.messages("t", {std::nullopt, limit}), InvalidArgument);
  }
}

TEST_CASE("a page of messages is one index scan from the cursor, in the generic plan too") {
  OutboxFixture f;
  {
    // Staged with SQL: 20,000 messages over 50 threads.
    pqxx::connection conn(f.db.url());
    pqxx::nontransaction tx(conn);
    tx.exec(
        "INSERT INTO thread_messages (thread_key, dedupe_key, body) "
        "SELECT 'thread-' || (i % 50), 'm-' || i, 'body' FROM generate_series(1, 20000) i");
    tx.exec("ANALYZE thread_messages");
  }
  for (const bool generic : {true, false}) {
    for (const std::string& after :
         {std::string("(extract(epoch FROM now()) * 1000000)::bigint, 900"),
          std::string("NULL, NULL")}) {
      const std::string plan = plan_of(f.db.url(), ship::sql::kMessagesPage.sql,
                                       "'thread-7', " + after + ", 101", generic);
      INFO(plan);
      CHECK(plan.find("Index Scan Backward using thread_messages_by_thread_created") !=
            std::string::npos);
      CHECK(plan.find("Sort") == std::string::npos);
      CHECK(plan.find("ROW(created_at, id) <") != std::string::npos);
    }
  }
}
