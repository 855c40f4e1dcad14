-- The due index leads with (workflow, version): claims and the next-due lookup probe it once per
-- (name, version) pair an executor runs. Ordered by due time alone, every claim scanned past the
-- due instances of workflows the executor does not run — such as instances pinned to a version
-- no executor runs any more, which stay due for as long as they wait (measured: creating
-- instances of an unregistered workflow next to one idle executor went from 0.65 ms to 3.6 ms per
-- create, each wakeup's claim reading all of them).
DROP INDEX wf_instances_due;
CREATE INDEX wf_instances_due ON wf_instances
  (workflow, version,
   (CASE status WHEN 'queued' THEN created_at WHEN 'waiting' THEN wake_at
                ELSE lease_expires_at END))
  WHERE status IN ('queued', 'waiting', 'running');
