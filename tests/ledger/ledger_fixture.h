// A fresh database, a pool and a Ledger for one test.
#pragma once

#include <catch2/catch.hpp>

#include "ids/ids.h"
#include "ledger/ledger.h"
#include "tests/support/test_database.h"

namespace runledger::testing {

inline ledger::Owner make_owner(const std::string& slot) {
  return {SlotName(slot), IncarnationId(random_uuid())};
}

inline ledger::DispatchRequest request(const std::string& key) {
  ledger::DispatchRequest r;
  r.dispatch_key = key;
  r.thread_key = "thread-" + key;
  r.requester = "alice";
  return r;
}

struct LedgerFixture {
  explicit LedgerFixture(ledger::Options options = {}, int pool_size = 8)
      : pool(db.pool_options(pool_size)), ledger(pool, options) {}

  // Runs a statement on its own connection (for inspecting or staging state).
  pqxx::result sql(const std::string& statement) const {
    pqxx::connection conn(db.url());
    pqxx::nontransaction tx(conn);
    return tx.exec(statement);
  }

  RunId dispatch(const std::string& key) { return ledger.dispatch(request(key)).run.run_id; }

  TestDatabase db;
  pg::Pool pool;
  ledger::Ledger ledger;
};

}  // namespace runledger::testing
