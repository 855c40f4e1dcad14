#include "migrations/test_clock/test_clock.h"

#include <string>

#include "errors/errors.h"
#include "migrations/migrations.h"
#include "pg/pg.h"

namespace runledger::migrations {
namespace {

constexpr pg::Statement kTakeLock{"test_clock_lock", "SELECT pg_advisory_xact_lock($1)"};
constexpr pg::Statement kHasRecord{"test_clock_has_record",
                                   "SELECT to_regclass('runledger_migrations') IS NOT NULL"};
constexpr pg::Statement kRecord{
    "test_clock_record", "SELECT count(*), coalesce(max(version), 0) FROM runledger_migrations"};
constexpr pg::Statement kMoveClock{"test_clock_move", "SELECT runledger_move_clock($1::bigint)"};
constexpr pg::Statement kHasClock{
    "test_clock_has_clock", "SELECT to_regprocedure('runledger_move_clock(bigint)') IS NOT NULL"};
constexpr pg::Statement kInUse{
    "test_clock_in_use",
    "SELECT EXISTS (SELECT 1 FROM live_runs) OR EXISTS (SELECT 1 FROM wf_instances)"};

// Migration 0012's clock, plus a check that moving it moved runledger_now(). Run as one script:
// trusted code shipped in the test binaries, not a value.
constexpr const char* kTestClock = R"sql(
CREATE SEQUENCE IF NOT EXISTS runledger_clock_skew_us MINVALUE 0 START 0;

CREATE OR REPLACE FUNCTION runledger_now() RETURNS timestamptz
  LANGUAGE plpgsql STABLE PARALLEL SAFE
  AS $$ BEGIN
    -- NULL until the first move (and if the sequence were reset without a value): no skew.
    RETURN now() + coalesce(pg_sequence_last_value('runledger_clock_skew_us'), 0)
                   * interval '1 microsecond';
  END $$;

-- Not safe against a concurrent mover; tests move the clock from one thread.
CREATE OR REPLACE FUNCTION runledger_move_clock(ms bigint) RETURNS timestamptz
  LANGUAGE plpgsql VOLATILE
  AS $$
DECLARE
  was_us bigint := coalesce(pg_sequence_last_value('runledger_clock_skew_us'), 0);
BEGIN
  IF ms < 0 THEN
    RAISE EXCEPTION 'the clock only moves forward (asked to move it by % ms)', ms
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  PERFORM setval('runledger_clock_skew_us', was_us + ms * 1000);
  IF runledger_now() <> now() + (was_us + ms * 1000) * interval '1 microsecond' THEN
    PERFORM setval('runledger_clock_skew_us', was_us);  -- no rollback undoes a setval
    RAISE EXCEPTION 'runledger_now() does not read the test clock: a migration replaced it after '
                    'the test clock was installed; install the test clock again'
      USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  RETURN runledger_now();
END $$;
)sql";

}  // namespace

void move_test_clock(pqxx::connection& conn, std::chrono::milliseconds by) {
  if (by.count() < 0) throw InvalidArgument("the clock moves forward only");
  pqxx::nontransaction tx(conn);
  pg::exec(tx, kMoveClock, static_cast<std::int64_t>(by.count()));
}

bool has_test_clock(pqxx::connection& conn) {
  pqxx::nontransaction tx(conn);
  return pg::exec(tx, kHasClock)[0][0].as<bool>();
}

void install_test_clock(pqxx::connection& conn) {
  pqxx::work tx(conn);
  pg::exec(tx, kTakeLock, kLock);  // a migration in progress finishes first
  const int known = static_cast<int>(all().size());
  const std::string fix = "; the test clock goes on a test database migrated by this build";
  if (!pg::exec(tx, kHasRecord)[0][0].as<bool>()) {
    throw Conflict("the database has no migrations" + fix, {{"migrations", known}});
  }
  const auto record = pg::exec(tx, kRecord)[0];
  if (record[0].as<int>() != known || record[1].as<int>() != known) {
    throw Conflict("the database has " + record[0].as<std::string>() + " migrations (latest " +
                       record[1].as<std::string>() + "), this build " + std::to_string(known) + fix,
                   {{"applied", record[0].as<int>()}, {"migrations", known}});
  }
  if (!pg::exec(tx, kHasClock)[0][0].as<bool>() && pg::exec(tx, kInUse)[0][0].as<bool>()) {
    throw Conflict(
        "the database holds runs or workflow instances and has no test clock: it is not a test "
        "database (install the test clock into a fresh one)");
  }
  tx.exec(kTestClock);
  tx.commit();
}

}  // namespace runledger::migrations
