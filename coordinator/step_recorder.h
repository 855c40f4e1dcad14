// The executor's group commit for step records. Private to coordinator/.
//
// Every step record is one row written by one statement, fenced on its own instance's generation;
// but when several replays (or branches) record at the same moment, their rows travel together:
// one statement, one commit, one WAL flush for all of them. A record that arrives while a batch is
// being written waits for it to end and goes with the next one, so a lone replay never waits for
// company (it is a batch of one) and a busy executor's batches grow with its load. After a batch of
// k rows, the next one waits up to 200 µs for k rows to gather (the k writers were released
// together and come back together), as PostgreSQL's commit_delay does for its group commit.
//
// Each row keeps the semantics of a lone record: written only while its writer's generation holds
// the instance and the step is not final yet; a refused row refuses only its own caller. A batch
// whose statement fails (an SQL error) is retried row by row, so an error reaches only the
// callers whose own row fails; so is one that met a lock timeout or a deadlock (Unavailable whose
// outcome is known: nothing was written). A lost connection, whose commit may have happened,
// reaches all.
// A row whose instance another transaction has locked holds its batch up until that one ends
// (claims and operator actions are single statements; sessions have a lock_timeout).
//
// Thread-safety: record() may be called from any number of threads at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/coordinator.h"
#include "ids/ids.h"
#include "pg/pg.h"

namespace runledger::coordinator {

struct StepRow {
  std::string instance_id;
  Generation generation{0};
  std::string key;
  StepKind kind = StepKind::run;
  json config;
  StepState state = StepState::pending;
  int attempts = 0;
  json output;  // null: none
  json error;   // null: none
  std::optional<std::int64_t> due_in_ms;
  // The history entry written with it.
  std::string what;
  json detail;
};

class StepRecorder {
 public:
  // At most `max_batch` rows per statement.
  explicit StepRecorder(pg::Pool& pool, std::size_t max_batch = 64);

  // Writes `row`. nullopt: refused (the writer no longer holds the instance at its generation, or
  // the step is final already); else whether the row's due time has passed (true when it has
  // none). Throws what the statement throws when the row cannot be written at all.
  std::optional<bool> record(const StepRow& row);

  // Rows waiting for a batch (not the one being written).
  std::size_t queued() const;

 private:
  struct Pending {
    const StepRow* row = nullptr;
    bool done = false;
    std::optional<bool> result;
    std::exception_ptr error;
  };
  // Writes `batch` (one statement), filling each one's result or error.
  void write(const std::vector<Pending*>& batch);
  void write_together(const std::vector<Pending*>& batch);

  pg::Pool& pool_;
  const std::size_t max_batch_;
  mutable std::mutex mu_;
  std::condition_variable done_;
  std::condition_variable arrived_;
  std::deque<Pending*> queue_;  // guarded by mu_, like the three below
  bool writing_ = false;        // a batch is in flight (or gathering)
  bool gathering_ = false;      // its writer waits for the last batch's writers to come back
  std::size_t last_batch_ = 0;
  // How long a batch waits for them at most: about one trivial step body and the way back.
  static constexpr std::chrono::microseconds kGatherWait{200};
};

}  // namespace runledger::coordinator
