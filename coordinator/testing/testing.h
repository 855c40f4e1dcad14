// Test support for workflow authors: step results and errors mocked by step name, forced event
// timeouts, and the database clock moved forward. For tests against a real PostgreSQL database
// of their own (the clock is per database: moving it moves every deadline in it).
//
// Contract:
//  - with_mocks() wraps a workflow: a run step whose name (every occurrence) or key (name#count,
//    counted within its branch) has a mock does not run its body; the mocked value, or the
//    mocked error as a NonRetryable, is recorded exactly as a body's would be (same key, config
//    and compensation), so replays, restarts and rollbacks behave as in production. Other steps
//    pass through unchanged, branches of all() included.
//  - expire_waits() is Coordinator::expire_waits() by "test": an instance's pending waits of a
//    name or key due now, so its next replay times them out (an event already buffered for one
//    is still taken, as at a real timeout).
//  - install_test_clock() installs the movable test clock into the database (migrations/
//    test_clock.h): runledger_now() then adds a skew that move_clock() raises. Never on a
//    production database: production's runledger_now() is plain now() (migration 0014), and
//    production code has no way to move it. Call it once the database is migrated by this build
//    and before anything is created in it (it refuses, with a Conflict, a database that is not
//    migrated by this build or that holds runs or instances without a test clock); calling it
//    again is harmless and keeps the time moved.
//  - move_clock() moves runledger_now() of the database forward; sleeps, retries, timeouts and
//    leases fall due without waiting. On a database without the test clock it is a Conflict
//    saying so, and nothing moves.
//
// Thread-safety: Mocks is immutable once given to with_mocks(); the rest are free functions.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "coordinator/coordinator.h"
#include "pg/pg.h"

namespace runledger::coordinator::testing {

class Mocks {
 public:
  // `step`: a step name, or a key "name#count".
  Mocks& result(const std::string& step, json value);
  Mocks& error(const std::string& step, std::string message);

  struct Mock {
    json value;
    std::optional<std::string> error;
  };
  // The mock for the step `name` with key `key`: the key's first, then the name's.
  const Mock* find(const std::string& name, const std::string& key) const;

 private:
  std::map<std::string, Mock> mocks_;
};

std::shared_ptr<Workflow> with_mocks(std::shared_ptr<Workflow> workflow, Mocks mocks);

// Returns how many pending waits (wait_for_event or wait_any) of `step` (a name, or a key
// name#count; inside branches the key's last part) were made due.
int expire_waits(pg::Pool& pool, const InstanceId& instance_id, const std::string& step);

void install_test_clock(pg::Pool& pool);

void move_clock(pg::Pool& pool, std::chrono::milliseconds by);

}  // namespace runledger::coordinator::testing
