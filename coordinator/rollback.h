// The rollback of an instance: the compensations its succeeded steps name, run latest first,
// each attempt journaled in wf_compensations and retried like a step. Private to coordinator/.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "coordinator/coordinator.h"
#include "pg/pg.h"

namespace runledger::coordinator {

// stopped: a handler is not registered; failed: a handler's final error.
enum class RollbackState { complete, stopped, failed };

struct RollbackEnd {
  RollbackState state = RollbackState::complete;
  int compensated = 0;  // compensations that have succeeded, in all executions
  std::string message;  // why it stopped or failed
  std::optional<std::string> step;
  std::optional<std::string> handler;
  json to_json() const;
};

// Runs the compensations still owed by instance `instance_id` at `generation`. Throws Suspended
// when a compensation's next attempt is not due yet, FencedError when the writer lost the
// instance.
RollbackEnd roll_back(pg::Pool& pool, const Registry& registry, const InstanceId& instance_id,
                      Generation generation, const std::atomic<bool>& lost);

}  // namespace runledger::coordinator
