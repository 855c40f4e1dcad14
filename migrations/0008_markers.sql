-- One-time facts about this database, e.g. that `runledger up` has shown its first-start demo.
CREATE TABLE runledger_markers (
  name       text PRIMARY KEY,
  created_at timestamptz NOT NULL DEFAULT runledger_now()
);
