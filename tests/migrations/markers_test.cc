// Markers: one-time facts about a database, recorded once however many processes try at once.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "errors/errors.h"
#include "migrations/migrations.h"
#include "tests/support/test_database.h"

using namespace runledger;
using namespace runledger::testing;

TEST_CASE("mark_once records a marker the first time only, and marked says whether it is") {
  TestDatabase db;
  pg::Pool pool(db.pool_options(2));
  CHECK_FALSE(migrations::marked(pool, "demo.ship"));
  CHECK(migrations::mark_once(pool, "demo.ship"));
  CHECK(migrations::marked(pool, "demo.ship"));
  CHECK_FALSE(migrations::mark_once(pool, "demo.ship"));
  CHECK(migrations::marked(pool, "demo.ship"));
  CHECK_FALSE(migrations::marked(pool, "something.else"));
}

TEST_CASE("of many mark_once calls at once, exactly one records the marker") {
  TestDatabase db;
  pg::Pool pool(db.pool_options(8));
  std::atomic<int> recorded = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      if (migrations::mark_once(pool, "once")) ++recorded;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(recorded == 1);
  CHECK(migrations::marked(pool, "once"));
}

TEST_CASE("a marker name must be 1-255 bytes without control characters") {
  TestDatabase db;
  pg::Pool pool(db.pool_options(1));
  CHECK_THROWS_AS(migrations::mark_once(pool, ""), InvalidArgument);
  CHECK_THROWS_AS(migrations::marked(pool, std::string(256, 'x')), InvalidArgument);
  CHECK_THROWS_AS(migrations::mark_once(pool, "a\nb"), InvalidArgument);
}
