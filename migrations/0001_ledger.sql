-- The run ledger: live_runs with leases and fencing, the database clock seam, and the instance
-- event table through which a run's terminal record announces itself to its parent instance.

-- The one seam through which every deadline reads the database clock. Production keeps the skew
-- at zero; a test moves time forward by raising it, without sleeping. Safety never depends on
-- it: the clock only decides when a lease may be taken, the generation decides whether a write
-- lands.
CREATE TABLE runledger_clock (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  skew     interval NOT NULL DEFAULT '0'
);
INSERT INTO runledger_clock DEFAULT VALUES;

CREATE FUNCTION runledger_now() RETURNS timestamptz
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT now() + skew FROM runledger_clock $$;

CREATE TABLE live_runs (
  run_id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  dispatch_key       text NOT NULL UNIQUE,
  thread_key         text NOT NULL,
  parent_run_id      uuid REFERENCES live_runs (run_id) ON DELETE SET NULL,
  parent_instance_id text,
  depth              integer NOT NULL DEFAULT 0 CHECK (depth >= 0),
  requester          text NOT NULL,
  profile            jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(profile) = 'object'),
  status             text NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'running', 'finished', 'failed', 'interrupted',
                                       'cancelled')),
  -- The fencing token: +1 at every claim. Every owner write names it.
  generation         bigint NOT NULL DEFAULT 0,
  owner_slot         text,
  owner_incarnation  uuid,
  lease_expires_at   timestamptz,
  -- Claims that took the run from a previous owner (as opposed to a queued run or a handoff).
  takeovers          integer NOT NULL DEFAULT 0,
  budget_wall_s      integer NOT NULL CHECK (budget_wall_s > 0),
  budget_max_steps   integer NOT NULL CHECK (budget_max_steps > 0),
  created_at         timestamptz NOT NULL DEFAULT runledger_now(),
  claimed_at         timestamptz,
  finished_at        timestamptz,
  result             jsonb,
  CONSTRAINT running_has_owner_and_lease CHECK (
    status <> 'running' OR
    (owner_slot IS NOT NULL AND owner_incarnation IS NOT NULL AND lease_expires_at IS NOT NULL)),
  CONSTRAINT queued_has_no_lease CHECK (status <> 'queued' OR lease_expires_at IS NULL),
  CONSTRAINT terminal_has_finished_at CHECK (
    (status IN ('finished', 'failed', 'interrupted', 'cancelled')) = (finished_at IS NOT NULL))
);

-- At most one live run per chat thread.
CREATE UNIQUE INDEX live_runs_one_live_per_thread ON live_runs (thread_key)
  WHERE status IN ('queued', 'running');

-- claim_next: queued runs (no lease) first, then expired leases, oldest first; the range scan up
-- to runledger_now() touches only claimable rows.
CREATE INDEX live_runs_claimable ON live_runs
  ((coalesce(lease_expires_at, '-infinity'::timestamptz)), created_at)
  WHERE status IN ('queued', 'running');

CREATE INDEX live_runs_by_owner_slot ON live_runs (owner_slot) WHERE status = 'running';
CREATE INDEX live_runs_by_parent_run ON live_runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX live_runs_by_parent_instance ON live_runs (parent_instance_id)
  WHERE parent_instance_id IS NOT NULL;
CREATE INDEX live_runs_by_finished_at ON live_runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX live_runs_by_created_at ON live_runs (created_at);

-- Messages to coordinator instances. Created with the ledger because a run's terminal write
-- inserts into it; the coordinator reads it. One row per (instance, dedupe key), so a repeated
-- announcement of the same fact is absorbed.
CREATE TABLE wf_events (
  event_id    bigserial PRIMARY KEY,
  instance_id text NOT NULL,
  event_type  text NOT NULL,
  dedupe_key  text NOT NULL,
  payload     jsonb NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT runledger_now(),
  UNIQUE (instance_id, dedupe_key)
);

-- Invariant 6, "terminal means announced": whoever writes a terminal status (the owner, a
-- reclaim, an operator, any future code path), the parent instance's run-finished event is
-- inserted in the same transaction. A trigger makes it impossible to forget. The NOTIFY on
-- channel runledger_wf_events (payload: the instance id) is delivered at commit.
CREATE FUNCTION live_runs_announce_terminal() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO wf_events (instance_id, event_type, dedupe_key, payload)
  VALUES (NEW.parent_instance_id, 'run-finished', 'run-finished:' || NEW.run_id,
          jsonb_build_object('run_id', NEW.run_id, 'status', NEW.status,
                             'result', coalesce(NEW.result, 'null'::jsonb)))
  ON CONFLICT (instance_id, dedupe_key) DO NOTHING;
  PERFORM pg_notify('runledger_wf_events', NEW.parent_instance_id);
  RETURN NULL;
END $$;

CREATE TRIGGER live_runs_terminal_announces
  AFTER UPDATE OF status ON live_runs
  FOR EACH ROW
  WHEN (NEW.parent_instance_id IS NOT NULL
        AND NEW.status IN ('finished', 'failed', 'interrupted', 'cancelled')
        AND OLD.status IS DISTINCT FROM NEW.status)
  EXECUTE FUNCTION live_runs_announce_terminal();
