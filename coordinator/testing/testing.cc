// Test support for workflow authors: mocks as a Step that wraps the engine's; forced timeouts and
// the test clock through the modules that own them (the coordinator, migrations/test_clock).
#include "coordinator/testing/testing.h"

#include "errors/errors.h"
#include "migrations/test_clock/test_clock.h"

namespace runledger::coordinator::testing {
namespace {

class MockedStep final : public Step {
 public:
  MockedStep(Step& inner, const Mocks& mocks) : inner_(inner), mocks_(mocks) {}

  const InstanceId& instance_id() const override { return inner_.instance_id(); }

  json run(std::string_view name, const StepConfig& config,
           const std::function<json(std::stop_token)>& body) override {
    const std::string key = std::string(name) + "#" + std::to_string(++counts_[std::string(name)]);
    const Mocks::Mock* mock = mocks_.find(std::string(name), key);
    if (!mock) return inner_.run(name, config, body);
    return inner_.run(name, config, [mock](std::stop_token) -> json {
      if (mock->error) throw NonRetryable(*mock->error);
      return mock->value;
    });
  }
  void sleep(std::string_view name, std::chrono::milliseconds duration) override {
    count(name);
    inner_.sleep(name, duration);
  }
  void sleep_until(std::string_view name, std::int64_t at_unix_ms) override {
    count(name);
    inner_.sleep_until(name, at_unix_ms);
  }
  json wait_for_event(std::string_view name, const EventWait& wait) override {
    count(name);
    return inner_.wait_for_event(name, wait);
  }
  AnyEvent wait_any(std::string_view name, const std::vector<EventMatch>& events,
                    std::chrono::milliseconds timeout) override {
    count(name);
    return inner_.wait_any(name, events, timeout);
  }
  std::vector<json> all(std::string_view name, const std::vector<Branch>& branches) override {
    count(name);
    std::vector<Branch> mocked;
    for (const auto& branch : branches) {
      mocked.push_back([this, &branch](Step& step) {
        MockedStep scope(step, mocks_);  // counts start again in each branch, as the keys do
        return branch(scope);
      });
    }
    return inner_.all(name, mocked);
  }
  RunId spawn(std::string_view name, ledger::DispatchRequest request) override {
    count(name);
    return inner_.spawn(name, std::move(request));
  }

 private:
  void count(std::string_view name) { ++counts_[std::string(name)]; }

  Step& inner_;
  const Mocks& mocks_;
  std::map<std::string, int> counts_;
};

class MockedWorkflow final : public Workflow {
 public:
  MockedWorkflow(std::shared_ptr<Workflow> inner, Mocks mocks)
      : inner_(std::move(inner)), mocks_(std::move(mocks)) {}
  json run(const json& input, Step& step) override {
    MockedStep mocked(step, mocks_);
    return inner_->run(input, mocked);
  }

 private:
  std::shared_ptr<Workflow> inner_;
  Mocks mocks_;
};

}  // namespace

Mocks& Mocks::result(const std::string& step, json value) {
  mocks_[step] = Mock{std::move(value), std::nullopt};
  return *this;
}

Mocks& Mocks::error(const std::string& step, std::string message) {
  mocks_[step] = Mock{json(), std::move(message)};
  return *this;
}

const Mocks::Mock* Mocks::find(const std::string& name, const std::string& key) const {
  if (const auto it = mocks_.find(key); it != mocks_.end()) return &it->second;
  if (const auto it = mocks_.find(name); it != mocks_.end()) return &it->second;
  return nullptr;
}

std::shared_ptr<Workflow> with_mocks(std::shared_ptr<Workflow> workflow, Mocks mocks) {
  if (!workflow) throw InvalidArgument("with_mocks needs a workflow");
  return std::make_shared<MockedWorkflow>(std::move(workflow), std::move(mocks));
}

int expire_waits(pg::Pool& pool, const InstanceId& instance_id, const std::string& step) {
  const Registry none;  // expire_waits reads no registration
  return Coordinator(pool, none).expire_waits(instance_id, step, "test");
}

void install_test_clock(pg::Pool& pool) {
  auto conn = pool.acquire();
  migrations::install_test_clock(*conn);
}

void move_clock(pg::Pool& pool, std::chrono::milliseconds by) {
  if (by.count() < 0) throw InvalidArgument("the clock moves forward only");
  auto conn = pool.acquire();
  if (!migrations::has_test_clock(*conn)) {
    throw Conflict(
        "the database has no test clock to move: call install_test_clock() on it first (test "
        "databases only; production's clock cannot be moved)");
  }
  migrations::move_test_clock(*conn, by);
}

}  // namespace runledger::coordinator::testing
