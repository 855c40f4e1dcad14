// The test support for workflow authors (coordinator/testing): mocked step results and errors,
// forced event timeouts, and the clock moved forward.
#include "coordinator/testing/testing.h"

#include <atomic>

#include "errors/errors.h"
#include "tests/coordinator/coordinator_fixture.h"
#include "tests/support/empty_database.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;
using coordinator::EventWait;
using coordinator::InstanceStatus;
namespace mock = coordinator::testing;

namespace {

// charge a card (twice), then wait for the receipt for a day.
class Checkout : public coordinator::Workflow {
 public:
  std::atomic<int> bodies{0};
  json run(const json&, coordinator::Step& step) override {
    const json first = step.run("charge", [&](std::stop_token) {
      ++bodies;
      return json("real-1");
    });
    const json second = step.run("charge", [&](std::stop_token) {
      ++bodies;
      return json("real-2");
    });
    json receipt;
    try {
      receipt = step.wait_for_event("receipt", EventWait{"receipt", json::object(), 24h});
    } catch (const coordinator::EventTimeout&) {
      receipt = "no receipt";
    }
    return json{first, second, receipt};
  }
};

void add(CoordinatorFixture& f, std::shared_ptr<coordinator::Workflow> workflow) {
  coordinator::Registration r;
  r.name = "checkout";
  r.max_duration = std::chrono::hours(48);  // the clock moves a day
  r.workflow = std::move(workflow);
  f.registry.add(std::move(r));
}

}  // namespace

TEST_CASE("a mocked step records the mocked value instead of running its body") {
  CoordinatorFixture f;
  auto checkout = std::make_shared<Checkout>();
  add(f, mock::with_mocks(checkout, mock::Mocks().result("charge#2", "mocked-2")));
  f.create("checkout", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  const auto id = "i-1";
  CHECK(mock::expire_waits(f.pool, InstanceId(id), "receipt") ==
        1);  // a forced timeout, no day passes
  REQUIRE(executor->run_one());
  CHECK(f.client().get(InstanceId(id)).output == json::array({"real-1", "mocked-2", "no receipt"}));
  CHECK(checkout->bodies == 1);
  const auto steps = f.client().steps(InstanceId(id));
  REQUIRE(steps.size() == 3);
  CHECK(steps[1].output == "mocked-2");                     // recorded like a body's value
  CHECK(steps[2].state == coordinator::StepState::failed);  // the timeout too
}

TEST_CASE("a mocked error is the step's final error, and a mock by name covers every call") {
  CoordinatorFixture f;
  auto checkout = std::make_shared<Checkout>();
  add(f, mock::with_mocks(checkout, mock::Mocks().error("charge", "card declined")));
  f.create("checkout", "i-1");
  REQUIRE(f.executor()->run_one());
  const auto instance = f.client().get(InstanceId("i-1"));
  CHECK(instance.status == InstanceStatus::errored);
  CHECK(instance.error["message"] == "card declined");
  CHECK(instance.error["kind"] == "non_retryable");
  CHECK(checkout->bodies == 0);
}

TEST_CASE("moving the clock makes a day-long wait time out without waiting") {
  CoordinatorFixture f;
  auto checkout = std::make_shared<Checkout>();
  add(f, checkout);
  f.create("checkout", "i-1");
  auto executor = f.executor();
  REQUIRE(executor->run_one());
  CHECK_FALSE(executor->run_one());
  mock::move_clock(f.pool, 24h + 1s);
  REQUIRE(executor->run_one());
  CHECK(f.client().get(InstanceId("i-1")).output[2] == "no receipt");
  CHECK_THROWS_AS(mock::move_clock(f.pool, -1s), InvalidArgument);
}

TEST_CASE("a workflow author's test database gets the movable clock from install_test_clock") {
  ProductionDatabase db;  // migrated as production is: its clock cannot move
  pg::Pool pool(db.url(), 2);
  const auto skew_s = [&] {
    auto conn = pool.acquire();
    pqxx::nontransaction tx(*conn);
    return tx.exec("SELECT extract(epoch FROM runledger_now() - now())")[0][0].as<double>();
  };
  try {
    mock::move_clock(pool, 1h);
    FAIL("expected a Conflict");
  } catch (const Conflict& e) {
    CHECK(std::string(e.what()).find("install_test_clock") != std::string::npos);
  }
  CHECK(skew_s() == 0.0);
  mock::install_test_clock(pool);
  mock::move_clock(pool, 1h);
  CHECK(skew_s() == Approx(3600.0));
  mock::install_test_clock(pool);  // again, as a per-test fixture would: the hour stays
  CHECK(skew_s() == Approx(3600.0));
}
