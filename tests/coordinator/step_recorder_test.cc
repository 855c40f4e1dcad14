// The executor's group commit of step records (coordinator/step_recorder.h): rows that arrive
// while a batch is being written share the next statement and its commit, and each row keeps a
// lone record's fencing and failure.
#include <chrono>
#include <limits>
#include <optional>
#include <thread>

#include "coordinator/step_recorder.h"  // private: the unit under test
#include "tests/coordinator/coordinator_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;
using coordinator::StepRecorder;
using coordinator::StepRow;

namespace {

// Instances a..d held by an executor at generation 1.
void hold_instances(CoordinatorFixture& f) {
  f.sql(
      "INSERT INTO wf_instances (instance_id, workflow, version, input, status, generation, owner, "
      "lease_expires_at, deadline_at) SELECT id, 'w', 1, '{}', 'running', 1, 'executor-1', "
      "now() + interval '1 hour', now() + interval '1 day' FROM unnest(ARRAY['a','b','c','d']) id");
}

StepRow succeeded(const std::string& instance_id, const std::string& key, std::int64_t generation,
                  coordinator::StepKind kind = coordinator::StepKind::run) {
  StepRow r;
  r.instance_id = instance_id;
  r.generation = Generation(generation);
  r.key = key;
  r.kind = kind;
  r.config = json::object();
  r.state = coordinator::StepState::succeeded;
  r.attempts = 1;
  r.output = json(instance_id + ":" + key);
  r.what = "step succeeded";
  r.detail = json{{"attempt", 1}};
  return r;
}

template <class Predicate>
bool eventually(Predicate done) {
  for (int i = 0; i < 1000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

struct Outcome {
  std::optional<bool> due;
  bool threw = false;
};

// Records `first` while instance a is locked by another session, so that its statement is in
// flight; records `rest` meanwhile (they queue); then lets everything through.
std::vector<Outcome> record_behind_a_batch(CoordinatorFixture& f, StepRecorder& recorder,
                                           const StepRow& first, const std::vector<StepRow>& rest) {
  pqxx::connection blocker(f.db.url());
  pqxx::work lock(blocker);
  lock.exec("SELECT 1 FROM wf_instances WHERE instance_id = 'a' FOR UPDATE");

  std::vector<Outcome> outcomes(rest.size() + 1);
  std::vector<std::thread> threads;
  const auto record = [&recorder](const StepRow& row, Outcome& out) {
    try {
      out.due = recorder.record(row);
    } catch (const std::exception&) {
      out.threw = true;
    }
  };
  threads.emplace_back(record, std::cref(first), std::ref(outcomes[0]));
  REQUIRE(eventually([&] {
    return !f.sql(
                 "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND "
                 "wait_event_type = 'Lock' AND query LIKE '%wf_steps%'")
                .empty();
  }));
  for (std::size_t i = 0; i < rest.size(); ++i) {
    threads.emplace_back(record, std::cref(rest[i]), std::ref(outcomes[i + 1]));
  }
  REQUIRE(eventually([&] { return recorder.queued() == rest.size(); }));
  lock.commit();
  for (auto& t : threads) t.join();
  return outcomes;
}

}  // namespace

TEST_CASE("step records that arrive while a batch is written share one statement and commit") {
  CoordinatorFixture f;
  hold_instances(f);
  pg::Pool pool(f.db.pool_options(4));
  StepRecorder recorder(pool);
  const StepRow a = succeeded("a", "s#1", 1);
  const std::vector<StepRow> rest{succeeded("b", "s#1", 1), succeeded("c", "s#1", 1),
                                  succeeded("d", "s#1", 1)};
  const auto outcomes = record_behind_a_batch(f, recorder, a, rest);
  for (const auto& o : outcomes) {
    CHECK_FALSE(o.threw);
    CHECK(o.due == std::optional<bool>(true));
  }
  // Rows written by one transaction carry its id.
  CHECK(f.sql("SELECT count(DISTINCT xmin::text) FROM wf_steps WHERE instance_id <> 'a'")[0][0]
            .as<int>() == 1);
  CHECK(f.sql("SELECT count(DISTINCT xmin::text) FROM wf_steps")[0][0].as<int>() == 2);
  CHECK(f.sql("SELECT count(*) FROM wf_history WHERE what = 'step succeeded'")[0][0].as<int>() ==
        4);
  CHECK(f.sql("SELECT output #>> '{}' FROM wf_steps WHERE instance_id = 'c'")[0][0]
            .as<std::string>() == "c:s#1");
}

TEST_CASE("a stale writer's row in a batch is refused alone") {
  CoordinatorFixture f;
  hold_instances(f);
  pg::Pool pool(f.db.pool_options(4));
  StepRecorder recorder(pool);
  const auto outcomes = record_behind_a_batch(
      f, recorder, succeeded("a", "s#1", 1),
      {succeeded("b", "s#1", 1), succeeded("c", "s#1", 0), succeeded("d", "s#1", 1)});
  CHECK(outcomes[1].due.has_value());
  CHECK_FALSE(outcomes[2].due.has_value());  // generation 0: c is held at 1
  CHECK_FALSE(outcomes[2].threw);
  CHECK(outcomes[3].due.has_value());
  CHECK(f.sql("SELECT instance_id FROM wf_steps ORDER BY 1").size() == 3);
  CHECK(f.sql("SELECT 1 FROM wf_steps WHERE instance_id = 'c'").empty());
}

TEST_CASE("a row that fails its statement fails only its own writer") {
  CoordinatorFixture f;
  hold_instances(f);
  pg::Pool pool(f.db.pool_options(4));
  StepRecorder recorder(pool);
  StepRow out_of_range = succeeded("c", "s#1", 1);
  out_of_range.due_in_ms = std::numeric_limits<std::int64_t>::max();  // no such timestamp
  const auto outcomes =
      record_behind_a_batch(f, recorder, succeeded("a", "s#1", 1),
                            {succeeded("b", "s#1", 1), out_of_range, succeeded("d", "s#1", 1)});
  CHECK(outcomes[1].due.has_value());
  CHECK(outcomes[2].threw);
  CHECK(outcomes[3].due.has_value());
  CHECK(f.sql("SELECT 1 FROM wf_steps WHERE instance_id IN ('b', 'd')").size() == 2);
}

TEST_CASE("a final step is not written over") {
  CoordinatorFixture f;
  hold_instances(f);
  pg::Pool pool(f.db.pool_options(2));
  StepRecorder recorder(pool);
  REQUIRE(recorder.record(succeeded("a", "s#1", 1)).has_value());
  StepRow again = succeeded("a", "s#1", 1);
  again.output = json("another value");
  CHECK_FALSE(recorder.record(again).has_value());
  CHECK(f.sql("SELECT output #>> '{}' FROM wf_steps WHERE instance_id = 'a'")[0][0]
            .as<std::string>() == "a:s#1");
}
