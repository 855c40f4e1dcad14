-- The HTTP API (server/): a run's input, API tokens, and the incarnations of HTTP slots.

-- Any JSON a dispatch gives its run (the task, for a bot that is not driven by a system prompt
-- alone); NULL when it gave none. Stored with the run and never changed.
ALTER TABLE live_runs ADD COLUMN input jsonb;

-- API tokens, stored only as the SHA-256 of the token's text: a leaked table leaks no credential.
-- A name names at most one token that is not revoked; a revoked name may be used again.
CREATE TABLE api_tokens (
  token_sha256 bytea PRIMARY KEY CHECK (octet_length(token_sha256) = 32),
  name         text NOT NULL CHECK (name <> ''),
  scope        text NOT NULL CHECK (scope IN ('bot', 'coordinator', 'operator')),
  -- The slots a bot token may claim for, a glob (settlement's syntax); NULL: any slot.
  slots        text,
  created_at   timestamptz NOT NULL DEFAULT runledger_now(),
  revoked_at   timestamptz
);
CREATE UNIQUE INDEX api_tokens_one_active_name ON api_tokens (name) WHERE revoked_at IS NULL;

-- Servers cache token lookups; a revocation tells them at once (channel runledger_tokens, the
-- hash in hex as the payload).
CREATE FUNCTION api_tokens_announce_revocation() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('runledger_tokens', encode(NEW.token_sha256, 'hex'));
  RETURN NULL;
END $$;

CREATE TRIGGER api_tokens_revocation_announces
  AFTER UPDATE OF revoked_at ON api_tokens
  FOR EACH ROW
  WHEN (NEW.revoked_at IS NOT NULL AND OLD.revoked_at IS NULL)
  EXECUTE FUNCTION api_tokens_announce_revocation();

-- HTTP slots: a bot over HTTP holds no database session, so nothing proves its predecessor dead.
-- Instead the newest incarnation of a slot wins, newest by first sight: http_slots holds each
-- slot's current incarnation, and every incarnation it replaced is refused for good. Runs owned
-- over HTTP carry owner_slot 'http:<slot>', a namespace no database slot may use (boot/ refuses
-- it), so an HTTP claim never takes the runs of a bot holding a database slot lock.
CREATE TABLE http_slots (
  slot        text PRIMARY KEY,
  incarnation uuid NOT NULL UNIQUE,
  since       timestamptz NOT NULL DEFAULT runledger_now()
);
CREATE TABLE http_superseded_incarnations (
  incarnation   uuid PRIMARY KEY,
  slot          text NOT NULL,
  superseded_at timestamptz NOT NULL DEFAULT runledger_now()
);
