// Transient database failures are never a workflow's outcome: a step record that meets a lock
// timeout or a deadlock leaves the instance unfinished, and it completes as an undisturbed one
// does, with nothing rolled back, even when the workflow's code caught the failure.
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "errors/errors.h"
#include "failpoint/failpoint.h"
#include "tests/coordinator/coordinator_fixture.h"
#include "tests/support/waiting.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;
using coordinator::InstanceStatus;
using coordinator::StepConfig;

namespace {

// charge (undone by "refund"), then ship; the workflow swallows any std::exception of ship, as
// careless workflow code would.
struct Order {
  std::atomic<int> charges{0};
  std::atomic<int> ships{0};
  std::atomic<int> refunds{0};

  void add_to(CoordinatorFixture& f) {
    f.registry.add_compensation(coordinator::Compensation{
        "refund", {}, [this](const coordinator::UndoRequest&, std::stop_token) { ++refunds; }});
    f.add("order", [this](const json&, coordinator::Step& step) {
      StepConfig undo;
      undo.compensation = "refund";
      const json charge = step.run("charge", undo, [this](std::stop_token) {
        ++charges;
        return json("c-1");
      });
      json shipped;
      try {
        shipped = step.run("ship", [this](std::stop_token) {
          ++ships;
          failpoint::hit("test.inside_ship");
          return json("s-1");
        });
      } catch (const std::exception& e) {
        return json{{"charge", charge}, {"shipped", false}, {"error", e.what()}};
      }
      return json{{"charge", charge}, {"shipped", shipped}};
    });
  }
};

const json kUndisturbed = {{"charge", "c-1"}, {"shipped", "s-1"}};

coordinator::Options short_locks() {
  coordinator::Options o;
  o.threads = 2;
  o.lock_timeout = 300ms;
  o.poll_interval = 100ms;
  o.unavailable_backoff.first = 20ms;
  return o;
}

const std::string kRetryStatement = "database unavailable";

std::vector<json> unavailable_entries(CoordinatorFixture& f, const std::string& id) {
  std::vector<json> out;
  for (const auto& h : f.client().history(InstanceId(id))) {
    CHECK(h.what != "rolling back");
    CHECK(h.what != "errored");
    if (h.what == "database unavailable") out.push_back(h.detail);
  }
  return out;
}

// Runs `executor` on its own thread until the scope ends.
struct Running {
  explicit Running(coordinator::Executor& e) : executor(e), thread([&e] { e.run(); }) {}
  ~Running() {
    failpoint::disarm_all();
    executor.request_stop();
    thread.join();
  }
  coordinator::Executor& executor;
  std::thread thread;
};

// Order o-1 on a running executor, paused inside ship's body: the test stands in the way of the
// record that follows, then releases it.
struct PausedInShip {
  explicit PausedInShip(coordinator::Options options = short_locks()) {
    order.add_to(f);
    f.create("order", "o-1");
    executor = f.executor(options);
    failpoint::arm("test.inside_ship", failpoint::Action::pause);
    running.emplace(*executor);
    REQUIRE(failpoint::wait_until_paused("test.inside_ship", 10s));
  }
  void release() { failpoint::release("test.inside_ship"); }
  // Another session holds the instance row while ship's record waits for it, until the record
  // has given up (lock_timeout) and the retry's statement is the one waiting; commit() ends it.
  pqxx::work& hold_row_until_the_retry_waits() {
    other.emplace(f.db.url());
    hold.emplace(*other);
    hold->exec("SELECT 1 FROM wf_instances WHERE instance_id = 'o-1' FOR UPDATE");
    release();
    REQUIRE(wait_for([&] { return lock_waiters(kRetryStatement) > 0; }, 10s));
    return *hold;
  }
  int lock_waiters(const std::string& text = "") {
    return runledger::testing::lock_waiters(f.db.url(), text);
  }
  // It completed as an undisturbed order does, with nothing undone; returns its
  // 'database unavailable' history entries.
  std::vector<json> completed_undisturbed() {
    REQUIRE(wait_for([&] { return f.status("o-1") == InstanceStatus::complete; }, 20s));
    CHECK(f.client().get(InstanceId("o-1")).output == kUndisturbed);
    CHECK(order.charges == 1);  // recorded before the failure: never run again
    CHECK(order.refunds == 0);
    return unavailable_entries(f, "o-1");
  }
  CoordinatorFixture f;
  Order order;
  std::unique_ptr<coordinator::Executor> executor;
  std::optional<Running> running;
  std::optional<pqxx::connection> other;
  std::optional<pqxx::work> hold;
};

}  // namespace

TEST_CASE("a step record that meets a lock timeout leaves the instance to finish undisturbed") {
  PausedInShip t;
  t.hold_row_until_the_retry_waits().commit();  // the retry then gets the row
  const auto entries = t.completed_undisturbed();
  CHECK(t.order.ships == 2);  // its record failed, so the body ran again
  REQUIRE(entries.size() == 1);
  CHECK(entries[0]["cause"] == "lock_timeout");
}

TEST_CASE("a step record chosen as a deadlock's victim leaves the instance to finish undisturbed") {
  // The deadlock check runs after deadlock_timeout (1 s): the lock must not time out first.
  auto options = short_locks();
  options.lock_timeout = 5s;
  PausedInShip t(options);
  // The other session writes ship's step row first (uncommitted), so the executor's record waits
  // for it while holding the instance FOR SHARE; then the other session wants the instance row
  // FOR UPDATE. The executor waited first, so its deadlock check runs first and it is the victim.
  pqxx::connection other(t.f.db.url());
  pqxx::work cross(other);
  cross.exec(
      "INSERT INTO wf_steps (instance_id, step_key, kind, config, state, generation) "
      "VALUES ('o-1', 'ship#1', 'run', '{}', 'pending', 0)");
  t.release();
  REQUIRE(wait_for([&] { return t.lock_waiters() > 0; }, 10s));
  cross.exec("SELECT 1 FROM wf_instances WHERE instance_id = 'o-1' FOR UPDATE");  // deadlock
  cross.abort();
  const auto entries = t.completed_undisturbed();
  CHECK(t.order.ships == 2);
  REQUIRE(entries.size() == 1);
  CHECK(entries[0]["cause"] == "deadlock");
}

TEST_CASE("an undisturbed order completes with the same output and no retry") {
  // The reference the tests here compare with.
  CoordinatorFixture f;
  Order order;
  order.add_to(f);
  f.create("order", "o-1");
  auto executor = f.executor(short_locks());
  while (executor->run_one()) {
  }
  REQUIRE(f.status("o-1") == InstanceStatus::complete);
  CHECK(f.client().get(InstanceId("o-1")).output == kUndisturbed);
  CHECK(order.ships == 1);
  CHECK(unavailable_entries(f, "o-1").empty());
}

TEST_CASE("when not even the retry can be recorded, the instance is left to its lease") {
  // The instance row stays locked past both the step record's and the retry's lock_timeout:
  // nothing at all is written, and the instance, still running, is claimed again once its lease
  // has expired.
  PausedInShip t;
  auto& hold = t.hold_row_until_the_retry_waits();
  REQUIRE(wait_for([&] { return t.lock_waiters() == 0; }, 10s));  // the retry gave up too
  CHECK(t.f.status("o-1") == InstanceStatus::running);
  hold.commit();
  t.f.db.advance_clock(31s);  // past the 30 s lease
  CHECK(t.completed_undisturbed().empty());
}
