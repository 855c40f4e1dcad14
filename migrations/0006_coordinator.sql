-- The coordinator: workflow instances, their step record, and their history. Instances are
-- leased and fenced like runs (generation bumped at every claim; every write checks it).

CREATE TABLE wf_instances (
  -- (A bounded repetition {1,255} in the pattern costs ~30 µs per row in PostgreSQL's regex
  -- engine; the length is checked on its own.)
  instance_id      text PRIMARY KEY
                   CHECK (length(instance_id) BETWEEN 1 AND 255
                          AND instance_id ~ '^[A-Za-z0-9_.:-]+$'),
  workflow         text NOT NULL,
  version          integer NOT NULL,
  input            jsonb NOT NULL,
  status           text NOT NULL DEFAULT 'queued'
                   CHECK (status IN ('queued', 'running', 'waiting', 'paused', 'complete',
                                     'errored', 'terminated')),
  output           jsonb,
  -- {"message", "step"} of the error that ended the instance.
  error            jsonb,
  generation       bigint NOT NULL DEFAULT 0,
  owner            text,
  lease_expires_at timestamptz,
  -- When a waiting instance is due again: its earliest sleep, wait timeout or retry, and never
  -- later than deadline_at. An event sent to it makes it due at once.
  wake_at          timestamptz,
  -- created_at + the workflow's maximum duration (invariant 10).
  deadline_at      timestamptz NOT NULL,
  -- Counts events sent to the instance. A replay that suspends compares it with the count it
  -- started from: an event that arrived meanwhile makes the instance due at once instead of
  -- being left to the wait's timeout.
  event_seq        bigint NOT NULL DEFAULT 0,
  -- The step key the instance was last in, for errors that name it.
  current_step     text,
  created_at       timestamptz NOT NULL DEFAULT runledger_now(),
  updated_at       timestamptz NOT NULL DEFAULT runledger_now(),
  finished_at      timestamptz,
  CONSTRAINT running_has_lease CHECK (status <> 'running' OR lease_expires_at IS NOT NULL),
  CONSTRAINT waiting_has_wake CHECK (status <> 'waiting' OR wake_at IS NOT NULL)
);

-- The claim: due instances, oldest due first. Queued instances are due at creation, waiting ones
-- at wake_at, running ones when their lease expires.
CREATE INDEX wf_instances_due ON wf_instances
  ((CASE status WHEN 'queued' THEN created_at WHEN 'waiting' THEN wake_at
                ELSE lease_expires_at END))
  WHERE status IN ('queued', 'waiting', 'running');
CREATE INDEX wf_instances_by_created_at ON wf_instances (created_at);

CREATE TABLE wf_steps (
  instance_id     text NOT NULL REFERENCES wf_instances (instance_id) ON DELETE CASCADE,
  step_key        text NOT NULL,  -- name#count
  kind            text NOT NULL CHECK (kind IN ('run', 'sleep', 'wait', 'spawn')),
  -- run: retry config; wait: {type, match, timeout_ms}; spawn: the dispatch request. Stored on
  -- first sight; the stored one wins on replay.
  config          jsonb NOT NULL,
  -- pending: a run step between attempts, a sleep or a wait not yet satisfied.
  state           text NOT NULL CHECK (state IN ('pending', 'succeeded', 'failed')),
  attempts        integer NOT NULL DEFAULT 0,
  -- A sleep's wake time, a wait's timeout, a run step's next attempt.
  due_at          timestamptz,
  output          jsonb,
  error           jsonb,  -- {"message", "kind"} of the final error
  generation      bigint NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT runledger_now(),
  updated_at      timestamptz NOT NULL DEFAULT runledger_now(),
  PRIMARY KEY (instance_id, step_key)
);

-- Append-only: what happened to an instance, for people (runledger instances history).
CREATE TABLE wf_history (
  id          bigserial PRIMARY KEY,
  instance_id text NOT NULL REFERENCES wf_instances (instance_id) ON DELETE CASCADE,
  at          timestamptz NOT NULL DEFAULT runledger_now(),
  generation  bigint,
  what        text NOT NULL,
  step_key    text,
  detail      jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX wf_history_by_instance ON wf_history (instance_id, id);

-- An event is consumed by exactly one wait.
ALTER TABLE wf_events
  ADD COLUMN consumed_by text,
  ADD COLUMN consumed_at timestamptz;
CREATE INDEX wf_events_unconsumed ON wf_events (instance_id, event_id) WHERE consumed_by IS NULL;

-- Executors sleep on channel runledger_wf; creations and events wake them, as does an instance
-- made due by an event.
CREATE FUNCTION wf_instances_announce() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('runledger_wf', '');
  RETURN NULL;
END $$;

CREATE TRIGGER wf_instances_created_announces
  AFTER INSERT ON wf_instances
  FOR EACH ROW EXECUTE FUNCTION wf_instances_announce();

-- An event makes its waiting instance due now (the replay decides whether a wait takes it), and
-- counts itself on the instance row (locking it until the event commits: a replay suspending
-- meanwhile waits for it and sees the new count).
CREATE FUNCTION wf_events_wake_instance() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  UPDATE wf_instances
  SET event_seq = event_seq + 1,
      wake_at = CASE WHEN status = 'waiting' THEN least(wake_at, runledger_now()) ELSE wake_at END
  WHERE instance_id = NEW.instance_id;
  PERFORM pg_notify('runledger_wf', '');
  RETURN NULL;
END $$;

CREATE TRIGGER wf_events_wake
  AFTER INSERT ON wf_events
  FOR EACH ROW EXECUTE FUNCTION wf_events_wake_instance();
