-- The ship pipeline's local ports: chat thread outbox, requester policy, change requests on a
-- local forge, and deploys.

-- Messages to chat threads, each posted once: the dedupe key is derived by the poster from what
-- the message is about (e.g. instance and stage), so a retried step does not post it twice.
CREATE TABLE thread_messages (
  id         bigserial PRIMARY KEY,
  thread_key text NOT NULL,
  dedupe_key text NOT NULL,
  body       text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT runledger_now(),
  UNIQUE (thread_key, dedupe_key)
);

-- Who may do what (e.g. agent:run:coding).
CREATE TABLE requester_capabilities (
  requester  text NOT NULL,
  capability text NOT NULL,
  granted_at timestamptz NOT NULL DEFAULT runledger_now(),
  PRIMARY KEY (requester, capability)
);

-- A change request of the local forge: a record pointing at a real branch of a local bare
-- repository. At most one open per (repository, branch).
CREATE TABLE change_requests (
  id         bigserial PRIMARY KEY,
  repository text NOT NULL,
  branch     text NOT NULL,
  title      text NOT NULL,
  body       text NOT NULL,
  state      text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'merged', 'closed')),
  merge_sha  text,
  -- When a review approved it (what a person merging looks for).
  approved_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT runledger_now(),
  updated_at timestamptz NOT NULL DEFAULT runledger_now(),
  CONSTRAINT merged_has_sha CHECK ((state = 'merged') = (merge_sha IS NOT NULL))
);
CREATE UNIQUE INDEX change_requests_one_open ON change_requests (repository, branch)
  WHERE state = 'open';

-- Deploys of the local deployer, idempotent on their key.
CREATE TABLE deploys (
  deploy_key  text PRIMARY KEY,
  sha         text NOT NULL,
  path        text NOT NULL,
  deployed_at timestamptz NOT NULL DEFAULT runledger_now()
);
