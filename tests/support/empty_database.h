// A database with nothing in it on the test cluster, and one migrated the production way.
#pragma once

#include <pqxx/pqxx>

#include "migrations/migrations.h"
#include "tests/support/test_database.h"

namespace runledger::testing {

// A fresh database (cloned from the template) emptied: no migrations, no test clock.
struct EmptyDatabase {
  EmptyDatabase() {
    pqxx::connection conn(template_db.url());
    pqxx::nontransaction tx(conn);
    tx.exec("DROP SCHEMA public CASCADE; CREATE SCHEMA public;");
  }
  TestDatabase template_db;  // a fresh database, emptied above
  const std::string& url() const { return template_db.url(); }
};

// An empty database migrated as `runledger migrate` and every service migrate: what production
// runs on.
struct ProductionDatabase : EmptyDatabase {
  ProductionDatabase() { migrations::apply(url()); }
};

}  // namespace runledger::testing
