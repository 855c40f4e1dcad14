-- Two costs PostgreSQL 15 paid on every write, whichever columns it touched. Measured with
-- pgbench (-M prepared, 1 client) on the transcript append, the hottest write (it moves the
-- transcript head on the run row), as server CPU per commit: 182 µs, against 150 µs for the same
-- statement on a copy of live_runs without CHECK constraints and 97 µs for a plain INSERT.

-- 1. The clock seam. runledger_now() read the skew from a one-row table: an executor start and a
--    scan (with a file-size lseek) per call site of every statement, ~7 µs each; a coordinator
--    step's statement had six call sites. The skew now lives in a sequence, whose last value is
--    one buffer read with no scan, and the function body is a simple expression that PL/pgSQL
--    evaluates without the executor (100,000 calls: 90 ms, against 540 ms). A sequence is not
--    transactional: moving the clock takes effect at once and is not undone by a rollback, which
--    is what its only writers (tests, through runledger_move_clock) want.
CREATE SEQUENCE runledger_clock_skew_us MINVALUE 0 START 0;
SELECT setval('runledger_clock_skew_us', (SELECT (extract(epoch FROM skew) * 1000000)::bigint
                                         FROM runledger_clock), true);

CREATE OR REPLACE FUNCTION runledger_now() RETURNS timestamptz
  LANGUAGE plpgsql STABLE PARALLEL SAFE
  AS $$ BEGIN
    -- NULL only if the sequence were reset without a value (ALTER SEQUENCE ... RESTART): no skew.
    RETURN now() + coalesce(pg_sequence_last_value('runledger_clock_skew_us'), 0)
                   * interval '1 microsecond';
  END $$;

-- Moves the database clock forward by `ms` milliseconds (tests only: production keeps the skew
-- at zero). Not safe against a concurrent mover; tests move the clock from one thread.
CREATE FUNCTION runledger_move_clock(ms bigint) RETURNS timestamptz
  LANGUAGE plpgsql VOLATILE
  AS $$ BEGIN
    IF ms < 0 THEN
      RAISE EXCEPTION 'the clock only moves forward (asked to move it by % ms)', ms
        USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM setval('runledger_clock_skew_us',
                   coalesce(pg_sequence_last_value('runledger_clock_skew_us'), 0) + ms * 1000);
    RETURN runledger_now();
  END $$;

DROP TABLE runledger_clock;

-- 2. live_runs's CHECK constraints. PostgreSQL re-reads every CHECK expression of a table from its
--    stored text and plans it again for each UPDATE statement (per statement, not per plan), ~30 µs
--    for these eight, though the transcript append and the step writes change none of the columns
--    they govern. The same rules, as a trigger that fires only when one of those columns is
--    written (a claim, a heartbeat, a release, a finish, a dispatch), raising the same SQLSTATE
--    (23514, check_violation) with the same constraint names. AFTER, not BEFORE, like the system
--    prompt's guard below: with any BEFORE UPDATE row trigger on the table, every UPDATE fetches
--    the old row for it first, whether or not the trigger then fires.
ALTER TABLE live_runs
  DROP CONSTRAINT live_runs_depth_check,
  DROP CONSTRAINT live_runs_profile_check,
  DROP CONSTRAINT live_runs_status_check,
  DROP CONSTRAINT live_runs_budget_wall_s_check,
  DROP CONSTRAINT live_runs_budget_max_steps_check,
  DROP CONSTRAINT running_has_owner_and_lease,
  DROP CONSTRAINT queued_has_no_lease,
  DROP CONSTRAINT terminal_has_finished_at;

CREATE FUNCTION live_runs_check_rules() RETURNS trigger
  LANGUAGE plpgsql AS $$
DECLARE
  broken text;
BEGIN
  -- As with CHECK, a rule whose expression is NULL holds.
  broken := CASE
    WHEN NOT (NEW.depth >= 0) THEN 'live_runs_depth_check'
    WHEN NOT (jsonb_typeof(NEW.profile) = 'object') THEN 'live_runs_profile_check'
    WHEN NOT (NEW.status IN ('queued', 'running', 'finished', 'failed', 'interrupted',
                             'cancelled')) THEN 'live_runs_status_check'
    WHEN NOT (NEW.budget_wall_s > 0) THEN 'live_runs_budget_wall_s_check'
    WHEN NOT (NEW.budget_max_steps > 0) THEN 'live_runs_budget_max_steps_check'
    WHEN NOT (NEW.status <> 'running' OR (NEW.owner_slot IS NOT NULL
              AND NEW.owner_incarnation IS NOT NULL AND NEW.lease_expires_at IS NOT NULL))
      THEN 'running_has_owner_and_lease'
    WHEN NOT (NEW.status <> 'queued' OR NEW.lease_expires_at IS NULL) THEN 'queued_has_no_lease'
    WHEN NOT ((NEW.status IN ('finished', 'failed', 'interrupted', 'cancelled'))
              = (NEW.finished_at IS NOT NULL)) THEN 'terminal_has_finished_at'
  END;
  IF broken IS NOT NULL THEN
    RAISE EXCEPTION 'new row for relation "live_runs" violates check constraint "%"', broken
      USING ERRCODE = 'check_violation', CONSTRAINT = broken, TABLE = 'live_runs';
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER live_runs_rules
  AFTER INSERT OR UPDATE OF depth, profile, status, budget_wall_s, budget_max_steps, owner_slot,
    owner_incarnation, lease_expires_at, finished_at ON live_runs
  FOR EACH ROW EXECUTE FUNCTION live_runs_check_rules();

DROP TRIGGER live_runs_system_prompt_immutable ON live_runs;
CREATE TRIGGER live_runs_system_prompt_immutable
  AFTER UPDATE OF system_prompt ON live_runs
  FOR EACH ROW
  WHEN (OLD.system_prompt IS DISTINCT FROM NEW.system_prompt)
  EXECUTE FUNCTION live_runs_system_prompt_is_immutable();
