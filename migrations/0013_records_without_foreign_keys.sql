-- A run's transcript entries and step records hang off their run without foreign keys.
--
-- Why: a foreign-key check is a query per inserted row (SELECT ... FOR KEY SHARE of the run row),
-- and on a row the same statement has just updated it still takes its lock and logs it. The
-- transcript append and the intents it carries are the hottest writes, and each of them already
-- proves the run exists in the same statement: it moves the head on the run row, or locks the row
-- FOR SHARE, guarded by generation and status (transcript/statements.h). Measured with pgbench
-- (-M prepared, 1 client, 2 s rounds alternated): the fenced 100 B append ran ~7% faster on a
-- copy of transcript_entries without the foreign key.
--
-- What the foreign keys gave, and what gives it now:
-- - No entry or step for a run that does not exist: every insert of either table reads its run
--   from a row the same statement updates or locks (a run row is only deleted when terminal, by
--   the retention sweep, and a terminal run admits no write).
-- - ON DELETE CASCADE: the statement trigger below deletes a deleted run's entries and steps in
--   the same statement, once per statement instead of once per row.
--
-- `= ANY (ARRAY(...))`, not a join with `gone`: the join was planned as a hash join over a
-- sequential scan of the whole table (auto_explain: every entry read to delete one run's 200),
-- and PL/pgSQL keeps that plan; an array probes the primary key's index once per run.
CREATE FUNCTION live_runs_delete_records() RETURNS trigger
  LANGUAGE plpgsql
  AS $$ BEGIN
    DELETE FROM transcript_entries WHERE run_id = ANY (ARRAY(SELECT run_id FROM gone));
    DELETE FROM run_steps WHERE run_id = ANY (ARRAY(SELECT run_id FROM gone));
    RETURN NULL;
  END $$;

CREATE TRIGGER live_runs_records_go_with_the_run
  AFTER DELETE ON live_runs REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION live_runs_delete_records();

ALTER TABLE transcript_entries DROP CONSTRAINT transcript_entries_run_id_fkey;
ALTER TABLE run_steps DROP CONSTRAINT run_steps_run_id_fkey;
