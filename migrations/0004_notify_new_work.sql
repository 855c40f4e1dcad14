-- Wakes idle bot processes when there is new work (a dispatch, or a run handed back by a
-- release) on channel runledger_runs, instead of leaving them to their polling fallback.
CREATE FUNCTION live_runs_announce_work() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('runledger_runs', '');
  RETURN NULL;
END $$;

CREATE TRIGGER live_runs_queued_announces
  AFTER INSERT OR UPDATE OF status ON live_runs
  FOR EACH ROW
  WHEN (NEW.status = 'queued')
  EXECUTE FUNCTION live_runs_announce_work();
