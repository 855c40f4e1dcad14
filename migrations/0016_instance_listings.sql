-- The coordinator's instance listings (coordinator/statements.h) page newest first by
-- (created_at, instance_id): all instances, those of a workflow, those with a status. The first
-- two are a backward scan of wf_instances_by_created from the cursor on (workflows are few, so
-- the workflow filter keeps most rows it reads). No index on workflow: every non-HOT update of
-- an instance (each claim, suspension and end) writes an entry into every index it belongs to,
-- and those are the hot path.
--
-- A status at rest (paused, or ended) can be rare among many (errored among the completed), so
-- those have an index of their own; it holds only instances at rest, which enter it once, when
-- they come to rest, and not at each claim or suspension. The active statuses (queued, running,
-- waiting) are read from wf_instances_by_created or from wf_instances_due, whose predicate is
-- exactly them. The index leaves them out for another reason as well: the hot statements find
-- an instance by id and `status = 'running'`, and an index on status that held running
-- instances was chosen for them, scanning every running entry (dead ones too) instead of the
-- primary key (waiting_bench took twice as long).
DROP INDEX wf_instances_by_created_at;
CREATE INDEX wf_instances_by_created ON wf_instances (created_at, instance_id);
CREATE INDEX wf_instances_by_status_created ON wf_instances (status, created_at, instance_id)
  WHERE status IN ('paused', 'complete', 'errored', 'terminated');
