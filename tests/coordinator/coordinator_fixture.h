// A coordinator on a fresh database, with workflows written as lambdas and an executor driven
// one replay at a time (Executor::run_one) with the database clock moved by hand.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <catch2/catch.hpp>
#include <pqxx/pqxx>

#include "coordinator/coordinator.h"
#include "ledger/ledger.h"
#include "tests/support/test_database.h"

namespace runledger::testing {

using coordinator::json;

class LambdaWorkflow : public coordinator::Workflow {
 public:
  using Body = std::function<json(const json&, coordinator::Step&)>;
  explicit LambdaWorkflow(Body body) : body_(std::move(body)) {}
  json run(const json& input, coordinator::Step& step) override { return body_(input, step); }

 private:
  Body body_;
};

struct CoordinatorFixture {
  CoordinatorFixture() : pool(db.pool_options(8)), ledger(pool) {}

  void add(const std::string& name, LambdaWorkflow::Body body,
           std::chrono::seconds max_duration = std::chrono::hours(1)) {
    coordinator::Registration r;
    r.name = name;
    r.max_duration = max_duration;
    r.workflow = std::make_shared<LambdaWorkflow>(std::move(body));
    registry.add(std::move(r));
  }

  coordinator::Coordinator& client() {
    if (!client_) client_ = std::make_unique<coordinator::Coordinator>(pool, registry);
    return *client_;
  }

  std::unique_ptr<coordinator::Executor> executor(coordinator::Options options = {},
                                                  const std::string& id = "executor-1") {
    return std::make_unique<coordinator::Executor>(db.url(), registry, id, options);
  }

  coordinator::Instance create(const std::string& workflow, const std::string& id,
                               const json& input = json::object()) {
    return client().create(workflow, InstanceId(id), input).instance;
  }

  coordinator::InstanceStatus status(const std::string& id) {
    return client().get(InstanceId(id)).status;
  }

  pqxx::result sql(const std::string& statement) const {
    pqxx::connection conn(db.url());
    pqxx::nontransaction tx(conn);
    return tx.exec(statement);
  }

  TestDatabase db;
  pg::Pool pool;
  ledger::Ledger ledger;
  coordinator::Registry registry;

 private:
  std::unique_ptr<coordinator::Coordinator> client_;
};

}  // namespace runledger::testing
