-- The coordinator's instance listings (coordinator/statements.h) page newest first by
-- (created_at, instance_id): all instances, those of a workflow, those with a status. The first
-- two are a backward scan of wf_instances_by_created from the cursor on (workflows are few, so
-- the workflow filter keeps most rows it reads); a status can be rare (errored), so it has an
-- index of its own. No index on workflow: every non-HOT update of an instance (each claim and
-- each end) writes an entry into every index, and the claim path is the hot one.
--
-- The status index leaves queued instances out: creation (create_batch's 100,000 at a time)
-- then writes one index entry fewer per instance, which waiting_bench measured as 10-20% of
-- its creation rate. Queued instances are listed from wf_instances_by_created instead; they are
-- the newest as a rule (a claim takes them within moments), so that backward scan finds them
-- at its start.
DROP INDEX wf_instances_by_created_at;
CREATE INDEX wf_instances_by_created ON wf_instances (created_at, instance_id);
CREATE INDEX wf_instances_by_status_created ON wf_instances (status, created_at, instance_id)
  WHERE status <> 'queued';
