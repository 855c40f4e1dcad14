-- The write-ahead record of a run: its tool steps (intent before the tool runs, result after)
-- and its transcript (append-only bytes, hash-chained, head kept on the run row).

-- Given at dispatch and never changed afterwards: a resumed run gets exactly these bytes back.
ALTER TABLE live_runs
  ADD COLUMN system_prompt bytea,
  -- The transcript head: seq of the last entry (0: none yet) and its chained SHA-256. Kept on the
  -- run row and updated in the same statement as each append, so a deleted tail is detectable
  -- and every append takes the run row's lock (the fence against claims).
  ADD COLUMN transcript_seq bigint NOT NULL DEFAULT 0,
  ADD COLUMN transcript_sha256 bytea NOT NULL DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;

CREATE FUNCTION live_runs_system_prompt_is_immutable() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the system prompt of run % cannot change', OLD.run_id
    USING ERRCODE = 'integrity_constraint_violation';
END $$;

CREATE TRIGGER live_runs_system_prompt_immutable
  BEFORE UPDATE OF system_prompt ON live_runs
  FOR EACH ROW
  WHEN (OLD.system_prompt IS DISTINCT FROM NEW.system_prompt)
  EXECUTE FUNCTION live_runs_system_prompt_is_immutable();

CREATE TABLE transcript_entries (
  run_id     uuid NOT NULL REFERENCES live_runs (run_id) ON DELETE CASCADE,
  seq        bigint NOT NULL CHECK (seq >= 1),
  generation bigint NOT NULL,
  kind       text NOT NULL
             CHECK (kind IN ('system', 'user', 'assistant', 'tool_result', 'synthetic')),
  -- Bytes as given, never parsed or re-serialized (provider-signed blocks must come back as-is).
  -- STORAGE EXTERNAL: large bodies are not compressed, so slices read without decompressing.
  body       bytea NOT NULL,
  -- sha256(previous sha256 || int8send(seq) || kind || '\x00' || body); the first entry chains on
  -- 32 zero bytes.
  sha256     bytea NOT NULL,
  created_at timestamptz NOT NULL DEFAULT runledger_now(),
  PRIMARY KEY (run_id, seq)
);
ALTER TABLE transcript_entries ALTER COLUMN body SET STORAGE EXTERNAL;

CREATE TABLE run_steps (
  run_id            uuid NOT NULL REFERENCES live_runs (run_id) ON DELETE CASCADE,
  -- Counts the run's tool calls across all generations.
  step_no           bigint NOT NULL CHECK (step_no >= 1),
  intent_generation bigint NOT NULL,
  result_generation bigint,
  tool              text NOT NULL,
  call_id           text NOT NULL,
  args              jsonb NOT NULL,
  -- run_id/step_no: stable across generations, for tools to pass downstream as an idempotency key.
  effect_key        text NOT NULL,
  state             text NOT NULL DEFAULT 'intent'
                    CHECK (state IN ('intent', 'done', 'failed', 'settled')),
  result            bytea,
  error             text,
  settlement        jsonb,
  started_at        timestamptz NOT NULL DEFAULT runledger_now(),
  finished_at       timestamptz,
  PRIMARY KEY (run_id, step_no),
  CONSTRAINT finished_step_has_result_generation CHECK (
    (state = 'intent') = (result_generation IS NULL))
);
