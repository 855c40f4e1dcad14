// The workflows the `runledger` executable registers with the coordinator (`runledger
// coordinator` runs them; `runledger instances` creates and reads their instances). Private to
// cli/.
#pragma once

#include "coordinator/coordinator.h"

namespace runledger::cli {

// Every built-in workflow, registered:
//  - "demo.approval" (version 1, at most 1 hour): greets input.name in a step, sleeps 1 s,
//    waits up to 10 minutes for an event of type "approval", and returns
//    {"greeting": "hello <name>", "approved_by": <the event payload's "by">}.
//  - "ship" (version 1, at most 14 days): the ship pipeline (ship/ship.h), run by
//    `ship` when given (the coordinator process builds it on its ports); without, registered only
//    for creating and reading instances.
coordinator::Registry builtin_workflows(std::shared_ptr<coordinator::Workflow> ship = nullptr);

}  // namespace runledger::cli
