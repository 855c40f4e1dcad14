// The movable database clock, for test databases only. Not a migration: `migrate` never installs
// it (production's runledger_now() is now(), migration 0014), and the runledger binary does not
// link this library. The test template gets it once (tests/support), so every database cloned
// from it has it; workflow authors' tests get it through coordinator::testing::install_test_clock.
//
// Contract:
//  - install_test_clock(conn) installs, in one transaction under the migration lock: the sequence
//    runledger_clock_skew_us (the skew in µs, from 0); runledger_now() = now() + the skew, with
//    production's signature, volatility and PL/pgSQL body shape, so statements plan as in
//    production; and runledger_move_clock(ms), which raises the skew by `ms` milliseconds, forward
//    only (a negative `ms` raises invalid_parameter_value). A sequence is not transactional:
//    moving the clock takes effect at once, for every session, and no rollback undoes it.
//  - It refuses with a Conflict, installing nothing, unless the database has every migration of
//    this build and no other (so this build's `migrate` has nothing left to apply over it), and,
//    where the test clock is not there yet, unless the database holds no run and no workflow
//    instance: a database in use is not a test database.
//  - Installing again keeps the skew (time moved stays moved) and puts back the test
//    runledger_now() if a later migration replaced it. Until then runledger_move_clock() raises
//    (object_not_in_prerequisite_state) and leaves the skew as it was, rather than silently not
//    moving time.
//
// Thread-safety: one call per connection at a time; concurrent calls on one database serialize
// on the migration lock.
#pragma once

#include <chrono>

#include <pqxx/pqxx>

namespace runledger::migrations {

void install_test_clock(pqxx::connection& conn);

// Whether the database has the test clock (runledger_move_clock exists).
bool has_test_clock(pqxx::connection& conn);

// Moves the database clock `by` forward (runledger_move_clock). InvalidArgument for a negative
// `by`; a database without the test clock raises (object_not_in_prerequisite_state).
void move_test_clock(pqxx::connection& conn, std::chrono::milliseconds by);

}  // namespace runledger::migrations
