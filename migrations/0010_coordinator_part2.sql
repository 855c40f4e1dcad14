-- The coordinator, part 2: wait_any steps, and durable compensation.

-- A wait_any step: the first of several event waits; its config is {any: [{type, match}],
-- timeout_ms} and its output {index, payload}.
ALTER TABLE wf_steps DROP CONSTRAINT wf_steps_kind_check;
ALTER TABLE wf_steps ADD CONSTRAINT wf_steps_kind_check
  CHECK (kind IN ('run', 'sleep', 'wait', 'wait_any', 'spawn'));

-- Set when the instance begins rolling back ({"reason": "failed", "error"} or {"reason":
-- "terminate", "by"}): a claim then runs the compensations still owed instead of the workflow.
ALTER TABLE wf_instances ADD COLUMN rollback jsonb;

-- The journal of a rollback: one row per compensated step, retried like a step.
CREATE TABLE wf_compensations (
  instance_id text NOT NULL,
  step_key    text NOT NULL,
  handler     text NOT NULL,
  state       text NOT NULL CHECK (state IN ('pending', 'succeeded', 'failed')),
  attempts    integer NOT NULL DEFAULT 0,
  -- The next attempt of a pending compensation.
  due_at      timestamptz,
  error       jsonb,  -- {"message", "kind"} of the last failed attempt
  generation  bigint NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT runledger_now(),
  updated_at  timestamptz NOT NULL DEFAULT runledger_now(),
  PRIMARY KEY (instance_id, step_key),
  FOREIGN KEY (instance_id, step_key) REFERENCES wf_steps (instance_id, step_key)
    ON DELETE CASCADE
);
