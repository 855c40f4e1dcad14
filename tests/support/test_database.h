// A fresh, migrated database per test, cloned from the template the test run prepared: with the
// test clock (migrations/test_clock/test_clock.h), so its runledger_now() moves with
// advance_clock().
//
// The cluster comes from RUNLEDGER_TEST_DATABASE_URL (set by `test_cluster run -- ctest ...`,
// which is what `./dev test` runs); without it the first TestDatabase in a process starts a
// throwaway embedded cluster for that process. NOTIFY channels and advisory locks are per
// database, so tests never share them.
#pragma once

#include <chrono>
#include <string>

#include "pg/pg.h"

namespace runledger::testing {

inline constexpr const char* kTemplateDatabase = "runledger_template";

class TestDatabase {
 public:
  TestDatabase();
  ~TestDatabase();
  TestDatabase(const TestDatabase&) = delete;
  TestDatabase& operator=(const TestDatabase&) = delete;

  const std::string& url() const { return url_; }
  const std::string& name() const { return name_; }

  // A pool on this database with test-sized timeouts.
  pg::Pool::Options pool_options(int size = 8) const;

  // Moves this database's test clock (runledger_now()) forward without sleeping.
  void advance_clock(std::chrono::milliseconds by) const;

 private:
  std::string admin_url_;
  std::string name_;
  std::string url_;
};

// The URL of `database` on the same server as `admin_url` (a postgresql:// URI).
std::string url_for_database(const std::string& admin_url, const std::string& database);

// Creates and migrates the template database on the cluster at `admin_url`, with the test clock.
void prepare_template(const std::string& admin_url);

}  // namespace runledger::testing
