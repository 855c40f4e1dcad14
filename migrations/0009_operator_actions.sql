-- Operator actions on instances. A restart from a step discards that step and every later one
-- (in the order they were first recorded) and counts itself, so that keys derived from a step
-- (a spawn's dispatch key) name a new child after a restart.
ALTER TABLE wf_instances ADD COLUMN restarts integer NOT NULL DEFAULT 0;
ALTER TABLE wf_steps ADD COLUMN recorded_seq bigint GENERATED ALWAYS AS IDENTITY;
