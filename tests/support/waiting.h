// Waiting in tests for something to become true: polled, so a test waits on a readiness signal
// (a row, a file, a lock wait the server reports) rather than a fixed sleep.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <pqxx/pqxx>

namespace runledger::testing {

// Polls `condition` every 5 ms until it holds or `timeout` passes; returns its last value.
inline bool wait_for(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

// Sessions of the database at `url` (other than the asking one) waiting for a lock, in a
// statement whose text contains `text`.
inline int lock_waiters(const std::string& url, const std::string& text = "") {
  pqxx::connection conn(url);
  pqxx::nontransaction tx(conn);
  return tx
      .exec_params(
          "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
          "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' "
          "AND strpos(query, $1) > 0",
          text)[0][0]
      .as<int>();
}

}  // namespace runledger::testing
