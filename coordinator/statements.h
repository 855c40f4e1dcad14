// Every SQL statement of the coordinator, in one place. Private to coordinator/.
//
// Fencing: every executor write names ($1 instance, $2 generation) and lands only while the
// instance is running under that generation: the step writes lock the instance row FOR SHARE
// in the same statement, the instance writes UPDATE it. A claim (which bumps the generation
// under FOR UPDATE) that commits first makes the write find no row; a write that commits first
// is seen by the claim.
#pragma once

#include "pg/pg.h"

namespace runledger::coordinator::sql {

#define RUNLEDGER_WF_INSTANCE_COLUMNS                                                    \
  "instance_id, workflow, version, input, status, output, error, generation, owner, "    \
  "wake_at::text, deadline_at::text, current_step, created_at::text, updated_at::text, " \
  "finished_at::text, rollback"

#define RUNLEDGER_WF_OWNER                                                 \
  "owner AS (SELECT instance_id FROM wf_instances WHERE instance_id = $1 " \
  "  AND generation = $2 AND status = 'running' FOR SHARE) "

// When an instance is due: created (queued), wake_at (waiting), its lease's end (running).
// Written exactly as in the index wf_instances_due, so that the index serves the claim.
#define RUNLEDGER_WF_DUE                                                                          \
  "(CASE status WHEN 'queued' THEN created_at WHEN 'waiting' THEN wake_at ELSE lease_expires_at " \
  "END)"

inline constexpr pg::Statement kCreate{
    "wf_create",
    "WITH ins AS (INSERT INTO wf_instances (instance_id, workflow, version, input, deadline_at) "
    "  VALUES ($1, $2, $3, $4::jsonb, runledger_now() + make_interval(secs => $5::bigint)) "
    "  ON CONFLICT (instance_id) DO NOTHING RETURNING *), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, detail) "
    "  SELECT instance_id, 0, 'created', jsonb_build_object('workflow', workflow, 'version', "
    "    version) FROM ins) "
    "SELECT " RUNLEDGER_WF_INSTANCE_COLUMNS " FROM ins"};

// $1 a JSON array of {id, input}; $2 workflow, $3 version, $4 max duration (s). Returns how
// many were new (an id that exists, or repeats in the batch, is skipped).
inline constexpr pg::Statement kCreateBatch{
    "wf_create_batch",
    "WITH ins AS (INSERT INTO wf_instances (instance_id, workflow, version, input, deadline_at) "
    "  SELECT x->>'id', $2, $3, x->'input', runledger_now() + make_interval(secs => $4::bigint) "
    "  FROM jsonb_array_elements($1::jsonb) AS x "
    "  ON CONFLICT (instance_id) DO NOTHING RETURNING instance_id, workflow, version), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, detail) "
    "  SELECT instance_id, 0, 'created', jsonb_build_object('workflow', workflow, 'version', "
    "    version) FROM ins) "
    "SELECT count(*) FROM ins"};

inline constexpr pg::Statement kGet{
    "wf_get", "SELECT " RUNLEDGER_WF_INSTANCE_COLUMNS " FROM wf_instances WHERE instance_id = $1"};

// Pages of instances newest first: KEY (a condition with its own parameters, or none) and the
// position of the previous page's last row (AT: microseconds since the epoch, ID: its instance
// id; both NULL for the first page), LIMIT the rows to fetch (the page's limit + 1). The row
// comparison is the index condition of wf_instances_by_created or _by_status_created (migration
// 0016): one backward index scan from the position. position_at is the next cursor's time.
// ORDER BY names the table's columns: a bare created_at would be the text output column, a
// sort of every row instead of the index's order.
#define RUNLEDGER_WF_INSTANCES_PAGE(KEY, AT, ID, LIMIT)                                    \
  "SELECT " RUNLEDGER_WF_INSTANCE_COLUMNS                                                  \
  ", (extract(epoch FROM created_at) * 1000000)::bigint AS position_at FROM wf_instances " \
  "WHERE " KEY " (created_at, instance_id) < (coalesce('epoch'::timestamptz + " AT         \
  "::bigint * interval '1 microsecond', 'infinity'), coalesce(" ID                         \
  "::text, '')) "                                                                          \
  "ORDER BY wf_instances.created_at DESC, wf_instances.instance_id DESC LIMIT " LIMIT

inline constexpr pg::Statement kInstances{"wf_instances_page",
                                          RUNLEDGER_WF_INSTANCES_PAGE("", "$1", "$2", "$3")};
// A status at rest, and an active one: each condition repeats the predicate of the partial
// index it may use (wf_instances_by_status_created, wf_instances_due; migration 0016), so the
// generic plan may use it too. Active instances are read by a filtered backward scan of
// wf_instances_by_created or, when the planner finds it cheaper, from wf_instances_due and a sort.
inline constexpr pg::Statement kInstancesAtRest{
    "wf_instances_at_rest",
    RUNLEDGER_WF_INSTANCES_PAGE("status IN ('paused', 'complete', 'errored', 'terminated') AND "
                                "status = $1 AND",
                                "$2", "$3", "$4")};
inline constexpr pg::Statement kInstancesActive{
    "wf_instances_active",
    RUNLEDGER_WF_INSTANCES_PAGE("status IN ('queued', 'waiting', 'running') AND status = $1 AND",
                                "$2", "$3", "$4")};
inline constexpr pg::Statement kInstancesOfWorkflow{
    "wf_instances_of_workflow", RUNLEDGER_WF_INSTANCES_PAGE("workflow = $1 AND", "$2", "$3", "$4")};
#undef RUNLEDGER_WF_INSTANCES_PAGE

#define RUNLEDGER_WF_STEP_COLUMNS \
  "step_key, kind, state, attempts, config, output, error, due_at::text, generation"

inline constexpr pg::Statement kSteps{
    "wf_steps", "SELECT " RUNLEDGER_WF_STEP_COLUMNS
                " FROM wf_steps WHERE instance_id = $1 ORDER BY created_at, step_key"};

// Oldest first, after entry $2 (NULL: from the start), $3 rows (wf_history_by_instance).
inline constexpr pg::Statement kHistory{
    "wf_history",
    "SELECT id, at::text, generation, what, step_key, detail FROM wf_history "
    "WHERE instance_id = $1 AND id > coalesce($2::bigint, 0) ORDER BY id LIMIT $3"};

// An operator's timeout of pending waits (a name or a key, within branches too): made due now,
// and the instance with them, so that its next replay times them out.
inline constexpr pg::Statement kExpireWaits{
    "wf_expire_waits",
    "WITH s AS (UPDATE wf_steps SET due_at = runledger_now() "
    "  WHERE instance_id = $1 AND kind IN ('wait', 'wait_any') AND state = 'pending' "
    "    AND $2 IN (step_key, regexp_replace(step_key, '^.*/', ''), "
    "      split_part(regexp_replace(step_key, '^.*/', ''), '#', 1)) "
    "  RETURNING step_key), "
    "i AS (UPDATE wf_instances SET wake_at = runledger_now() "
    "  WHERE instance_id = $1 AND status = 'waiting' AND EXISTS (SELECT 1 FROM s) "
    "  RETURNING 1), "
    "h AS (INSERT INTO wf_history (instance_id, what, detail) "
    "  SELECT $1, 'waits expired', jsonb_build_object('step', $2::text, 'by', $3::text, "
    "    'waits', (SELECT jsonb_agg(step_key) FROM s)) WHERE EXISTS (SELECT 1 FROM s)) "
    "SELECT (SELECT count(*) FROM s)"};

// $4 dedupe key, $5 who sent it. Returns the event id; no row when the key was used already.
inline constexpr pg::Statement kSendEvent{
    "wf_send_event",
    "WITH e AS (INSERT INTO wf_events (instance_id, event_type, payload, dedupe_key) "
    "  SELECT instance_id, $2, $3::jsonb, $4 FROM wf_instances WHERE instance_id = $1 "
    "  ON CONFLICT (instance_id, dedupe_key) DO NOTHING RETURNING event_id, instance_id), "
    "h AS (INSERT INTO wf_history (instance_id, what, detail) "
    "  SELECT instance_id, 'event sent', jsonb_build_object('event_id', event_id, 'type', "
    "$2::text, "
    "    'dedupe_key', $4::text, 'by', $5::text) FROM e) "
    "SELECT event_id FROM e"};

inline constexpr pg::Statement kExists{"wf_exists",
                                       "SELECT 1 FROM wf_instances WHERE instance_id = $1"};

// Claims the oldest due instance of workflows $2 (a JSON array of {name, version}) for executor $1
// with a lease of $3 ms. One index probe per (name, version) pair (wf_instances_due leads with
// them), each locking its oldest due instance: due instances of workflows this executor does not
// run are never read. Returns the instance, the event count, the time left to its deadline, and
// its step record with each step's time left until due (ms on the database clock; NULL: no due
// time).
//
// The claim commits without waiting for its WAL flush (synchronous_commit off for this
// transaction only): the new owner's first durable write flushes the WAL up to and including the
// claim, so a claim lost to a server crash loses nothing recorded, only a step body that ran
// without being recorded, which runs again like any body whose executor died. Saves a flush
// between a creation's NOTIFY and the first step.
inline constexpr pg::Statement kClaim{
    "wf_claim",
    "WITH no_flush_wait AS (SELECT set_config('synchronous_commit', 'off', true)), "
    "candidates AS (SELECT c.instance_id, c.was, c.due "
    "  FROM jsonb_to_recordset($2::jsonb) AS w(name text, version int) "
    "  CROSS JOIN LATERAL (SELECT instance_id, status AS was, " RUNLEDGER_WF_DUE
    " AS due "
    "    FROM wf_instances WHERE workflow = w.name AND version = w.version "
    "      AND status IN ('queued', 'waiting', 'running') AND " RUNLEDGER_WF_DUE
    " <= runledger_now() "
    "    ORDER BY " RUNLEDGER_WF_DUE
    " LIMIT 1 FOR UPDATE SKIP LOCKED) c), "
    "picked AS (SELECT instance_id, was FROM candidates, no_flush_wait ORDER BY due LIMIT 1), "
    "claimed AS (UPDATE wf_instances i SET status = 'running', generation = i.generation + 1, "
    "    owner = $1, lease_expires_at = runledger_now() + make_interval(secs => $3::bigint / "
    "1000.0), "
    "    wake_at = NULL, updated_at = runledger_now() "
    "  FROM picked WHERE i.instance_id = picked.instance_id "
    "  RETURNING i.instance_id, i.workflow, i.version, i.input, i.generation, i.event_seq, "
    "    i.restarts, i.rollback, "
    "    (extract(epoch FROM i.deadline_at - runledger_now()) * 1000)::bigint AS deadline_in_ms, "
    "    picked.was), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, detail) "
    "  SELECT instance_id, generation, 'taken over', jsonb_build_object('executor', $1::text) "
    "  FROM claimed WHERE was = 'running') "
    "SELECT c.instance_id, c.workflow, c.version, c.input, c.generation, c.event_seq, c.restarts, "
    "  c.deadline_in_ms, c.rollback, "
    "  (SELECT coalesce(jsonb_agg(jsonb_build_object('step_key', s.step_key, 'kind', s.kind, "
    "     'state', s.state, 'attempts', s.attempts, 'config', s.config, 'output', s.output, "
    "     'error', s.error, 'due_in_ms', "
    "     (extract(epoch FROM s.due_at - runledger_now()) * 1000)::bigint)), "
    "     '[]'::jsonb) "
    "   FROM wf_steps s WHERE s.instance_id = c.instance_id) AS steps "
    "FROM claimed c"};

// Unfinished instances of the workflows named in $1 (a JSON array of {name, version}) that are
// pinned to a version not in it: workflow, version, how many.
inline constexpr pg::Statement kOtherVersions{
    "wf_other_versions",
    "SELECT workflow, version, count(*) FROM wf_instances "
    "WHERE status IN ('queued', 'waiting', 'running', 'paused') "
    "  AND workflow IN (SELECT w.name FROM jsonb_to_recordset($1::jsonb) AS w(name text, version "
    "    int)) "
    "  AND NOT EXISTS (SELECT 1 FROM jsonb_to_recordset($1::jsonb) AS w(name text, version int) "
    "    WHERE w.name = workflow AND w.version = wf_instances.version) "
    "GROUP BY workflow, version ORDER BY workflow, version"};

// The earliest due time of a workflow in $1, as milliseconds from now rounded up (0 or less:
// due): one probe of wf_instances_due per (name, version) pair. (min() over the whole table read
// all 100,000 waiting instances of the waiting benchmark, ~80 ms, and woke them late.)
inline constexpr pg::Statement kNextDue{
    "wf_next_due",
    "SELECT ceil(extract(epoch FROM min(x.due) - runledger_now()) * 1000)::bigint "
    "FROM jsonb_to_recordset($1::jsonb) AS w(name text, version int) "
    "CROSS JOIN LATERAL (SELECT " RUNLEDGER_WF_DUE
    " AS due FROM wf_instances "
    "  WHERE workflow = w.name AND version = w.version "
    "    AND status IN ('queued', 'waiting', 'running') "
    "  ORDER BY " RUNLEDGER_WF_DUE " LIMIT 1) x"};

// What a step record does on a conflict: a step already final is left alone (no row).
#define RUNLEDGER_WF_STEP_UPSERT                                                       \
  "ON CONFLICT (instance_id, step_key) DO UPDATE SET state = EXCLUDED.state, "         \
  "  attempts = EXCLUDED.attempts, output = EXCLUDED.output, error = EXCLUDED.error, " \
  "  due_at = EXCLUDED.due_at, generation = EXCLUDED.generation, "                     \
  "  updated_at = runledger_now() "                                                    \
  "WHERE wf_steps.state = 'pending' "

// Records a step's terminal or pending state: $3 key, $4 kind, $5 config, $6 state, $7 attempts,
// $8 output, $9 error, $10 due in ms from now (NULL: none), $11 history `what`, $12 detail.
// Written only while $2 holds the instance $1 and over a step still pending, with its history
// entry. Returns whether its due time has passed. StepRecorder's batch of one: cheaper than
// kRecordSteps with one row (no JSON to take apart, no joins), and a lone replay records every
// step alone.
inline constexpr pg::Statement kRecordStep{
    "wf_record_step",
    "WITH " RUNLEDGER_WF_OWNER
    ", "
    "s AS (INSERT INTO wf_steps (instance_id, step_key, kind, config, state, attempts, output, "
    "    error, due_at, generation) "
    "  SELECT instance_id, $3, $4, $5::jsonb, $6, $7, $8::jsonb, $9::jsonb, "
    "    runledger_now() + make_interval(secs => $10::bigint / 1000.0), $2 FROM owner "
    "  " RUNLEDGER_WF_STEP_UPSERT
    "RETURNING step_key, due_at), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, step_key, detail) "
    "  SELECT $1, $2, $11, step_key, $12::jsonb FROM s) "
    "SELECT due_at IS NULL OR due_at <= runledger_now() FROM s"};

// The same for the steps of several instances at once (StepRecorder's batches): $1 a JSON array
// of {n, instance_id, generation, step_key, kind, config, state, attempts, output, error, due_ms,
// what, detail}, each row fenced on its own. Returns (n, whether its due time has passed) per
// written row. The instances are locked in instance_id order, like the heartbeat's, so that two
// such statements cannot deadlock.
inline constexpr pg::Statement kRecordSteps{
    "wf_record_steps",
    "WITH r AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(n int, instance_id text, "
    "    generation bigint, step_key text, kind text, config jsonb, state text, attempts int, "
    "    output jsonb, error jsonb, due_ms bigint, what text, detail jsonb)), "
    "owner AS (SELECT r.* FROM r JOIN wf_instances i ON i.instance_id = r.instance_id "
    "    AND i.generation = r.generation AND i.status = 'running' "
    "  ORDER BY i.instance_id FOR SHARE OF i), "
    "s AS (INSERT INTO wf_steps (instance_id, step_key, kind, config, state, attempts, output, "
    "    error, due_at, generation) "
    "  SELECT instance_id, step_key, kind, config, state, attempts, output, error, "
    "    runledger_now() + make_interval(secs => due_ms / 1000.0), generation FROM owner "
    "  " RUNLEDGER_WF_STEP_UPSERT
    "RETURNING instance_id, step_key, due_at), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, step_key, detail) "
    "  SELECT o.instance_id, o.generation, o.what, o.step_key, o.detail "
    "  FROM s JOIN owner o USING (instance_id, step_key)) "
    "SELECT o.n, s.due_at IS NULL OR s.due_at <= runledger_now() "
    "FROM s JOIN owner o USING (instance_id, step_key)"};

// Records a sleep until $4 (epoch ms on the database clock) or, when $4 is NULL, for $5 ms from
// now; a sleep already recorded keeps its time. Returns whether the writer owns the instance and
// whether the sleep (as recorded) is due; a recorded sleep returns NULL for the latter.
inline constexpr pg::Statement kRecordSleep{
    "wf_record_sleep",
    "WITH " RUNLEDGER_WF_OWNER
    ", "
    "t AS (SELECT coalesce(to_timestamp($4::bigint / 1000.0), "
    "  runledger_now() + make_interval(secs => $5::bigint / 1000.0)) AS until), "
    "s AS (INSERT INTO wf_steps (instance_id, step_key, kind, config, state, due_at, generation) "
    "  SELECT instance_id, $3, 'sleep', jsonb_build_object('until', t.until), 'pending', "
    "    t.until, $2 FROM owner, t "
    "  ON CONFLICT (instance_id, step_key) DO NOTHING RETURNING step_key, due_at), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, step_key, detail) "
    "  SELECT $1, $2, 'sleep', step_key, jsonb_build_object('until', due_at) FROM s) "
    "SELECT (SELECT count(*) FROM owner), (SELECT due_at <= runledger_now() FROM s)"};

// A wait or wait_any ($3 key, $4 kind, $5 the alternatives [{type, match}], $6 config, $7
// timeout ms): takes the oldest unconsumed event matching any alternative, recording the wait as
// succeeded with it (a wait: the payload; a wait_any: {index, payload}, index the first
// alternative it matches), or as pending with its timeout when none is there (a wait already
// recorded keeps its timeout). Returns whether the writer owns the instance, and the output
// (NULL: no event taken).
inline constexpr pg::Statement kWait{
    "wf_wait",
    "WITH " RUNLEDGER_WF_OWNER
    ", "
    "alt AS (SELECT (x.ord - 1)::int AS idx, x.a->>'type' AS type, x.a->'match' AS match "
    "  FROM jsonb_array_elements($5::jsonb) WITH ORDINALITY AS x(a, ord)), "
    "ev AS (SELECT e.event_id FROM wf_events e JOIN owner o USING (instance_id) "
    "  WHERE e.consumed_by IS NULL "
    "    AND EXISTS (SELECT 1 FROM alt WHERE alt.type = e.event_type AND e.payload @> alt.match) "
    "  ORDER BY e.event_id LIMIT 1 FOR UPDATE OF e SKIP LOCKED), "
    "used AS (UPDATE wf_events e SET consumed_by = $3, consumed_at = runledger_now() "
    "  FROM ev WHERE e.event_id = ev.event_id RETURNING e.event_id, e.event_type, e.payload), "
    "taken AS (SELECT u.event_id, u.event_type, "
    "    (SELECT min(alt.idx) FROM alt WHERE alt.type = u.event_type AND u.payload @> alt.match) "
    "      AS idx, "
    "    CASE WHEN $4 = 'wait' THEN u.payload ELSE jsonb_build_object('index', "
    "      (SELECT min(alt.idx) FROM alt WHERE alt.type = u.event_type AND u.payload @> "
    "alt.match), "
    "      'payload', u.payload) END AS output "
    "  FROM used u), "
    "st AS (INSERT INTO wf_steps (instance_id, step_key, kind, config, state, due_at, output, "
    "    generation) "
    "  SELECT o.instance_id, $3, $4, $6::jsonb, "
    "    CASE WHEN t.event_id IS NULL THEN 'pending' ELSE 'succeeded' END, "
    "    runledger_now() + make_interval(secs => $7::bigint / 1000.0), t.output, $2 "
    "  FROM owner o LEFT JOIN taken t ON true "
    "  ON CONFLICT (instance_id, step_key) DO UPDATE SET state = EXCLUDED.state, "
    "    output = EXCLUDED.output, generation = EXCLUDED.generation, updated_at = "
    "runledger_now() "
    "  WHERE wf_steps.state = 'pending' AND EXCLUDED.state = 'succeeded' RETURNING step_key), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, step_key, detail) "
    "  SELECT $1, $2, 'event received', $3, jsonb_build_object('event_id', event_id, 'type', "
    "    event_type, 'index', idx) FROM taken) "
    "SELECT (SELECT count(*) FROM owner), (SELECT output FROM taken)"};

// The replay stopped at steps $5 (a JSON array of keys; several from the branches of all()),
// none due: the instance waits until the earliest of their due times (a step's, or a
// compensation's during a rollback), never past its deadline unless rolling back, or is due at
// once when an event arrived since the claim ($3 the event count the claim saw). $4 names the
// step for people.
inline constexpr pg::Statement kSuspend{
    "wf_suspend",
    "WITH k AS (SELECT jsonb_array_elements_text($5::jsonb) AS step_key), "
    "due AS (SELECT min(d) AS at FROM (SELECT s.due_at AS d FROM wf_steps s JOIN k USING "
    "(step_key) "
    "    WHERE s.instance_id = $1 "
    "  UNION ALL SELECT c.due_at FROM wf_compensations c JOIN k USING (step_key) "
    "    WHERE c.instance_id = $1) x), "
    "i AS (UPDATE wf_instances SET status = 'waiting', owner = NULL, lease_expires_at = NULL, "
    "    wake_at = CASE WHEN event_seq <> $3 THEN runledger_now() "
    "      ELSE least(coalesce((SELECT at FROM due), runledger_now()), "
    "        CASE WHEN rollback IS NULL THEN deadline_at END) END, "
    "    current_step = $4, updated_at = runledger_now() "
    "  WHERE instance_id = $1 AND generation = $2 AND status = 'running' "
    "  RETURNING instance_id, wake_at), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, step_key, detail) "
    "  SELECT instance_id, $2, 'waiting', $4, jsonb_build_object('until', wake_at) FROM i) "
    "SELECT 1 FROM i"};

// Ends the instance: $3 status (complete | errored), $4 output, $5 error, $6 current step.
inline constexpr pg::Statement kFinish{
    "wf_finish",
    "WITH i AS (UPDATE wf_instances SET status = $3, output = $4::jsonb, error = $5::jsonb, "
    "    owner = NULL, lease_expires_at = NULL, wake_at = NULL, current_step = $6, "
    "    finished_at = runledger_now(), updated_at = runledger_now() "
    "  WHERE instance_id = $1 AND generation = $2 AND status = 'running' RETURNING instance_id), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, step_key, detail) "
    "  SELECT instance_id, $2, $3, $6, coalesce($5::jsonb, '{}'::jsonb) FROM i) "
    "SELECT 1 FROM i"};

// The replay met a transient database failure ($4 its cause): the instance waits $3 ms (the
// executor's backoff; never past its deadline unless rolling back) and is then due again for any
// executor, like a suspended one. Not an outcome: nothing of the failure is recorded on the
// instance but this history entry. No row when $2 no longer holds it.
inline constexpr pg::Statement kRetryLater{
    "wf_retry_later",
    "WITH i AS (UPDATE wf_instances SET status = 'waiting', owner = NULL, lease_expires_at = NULL, "
    "    wake_at = least(runledger_now() + make_interval(secs => $3::bigint / 1000.0), "
    "      CASE WHEN rollback IS NULL THEN deadline_at END), "
    "    updated_at = runledger_now() "
    "  WHERE instance_id = $1 AND generation = $2 AND status = 'running' "
    "  RETURNING instance_id, current_step), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, step_key, detail) "
    "  SELECT instance_id, $2, 'database unavailable', current_step, "
    "    jsonb_build_object('cause', $4::text, 'retry_in_ms', $3::bigint) FROM i) "
    "SELECT 1 FROM i"};

// Extends by $2 ms the leases of $1, a JSON array of {instance_id, generation}; returns those
// still held. Locks them in instance_id order first, like kRecordSteps: an UPDATE ... FROM would
// lock them in whatever order its plan visits them.
inline constexpr pg::Statement kHeartbeat{
    "wf_heartbeat",
    "WITH held AS (SELECT i.instance_id FROM wf_instances i "
    "  JOIN jsonb_to_recordset($1::jsonb) AS h(instance_id text, generation bigint) "
    "    ON i.instance_id = h.instance_id AND i.generation = h.generation "
    "  WHERE i.status = 'running' ORDER BY i.instance_id FOR NO KEY UPDATE OF i) "
    "UPDATE wf_instances i SET lease_expires_at = runledger_now() + make_interval(secs => "
    "$2::bigint / 1000.0) "
    "FROM held WHERE i.instance_id = held.instance_id "
    "RETURNING i.instance_id"};

// The instance's current generation and status, to tell a fenced write from a conflict.
inline constexpr pg::Statement kGeneration{
    "wf_generation", "SELECT generation, status FROM wf_instances WHERE instance_id = $1"};

// Operator actions: $1 instance, $2 who. Each bumps the generation (the executor holding the
// instance is fenced out at its next write) and records itself in the history.
#define RUNLEDGER_WF_OPERATOR_HISTORY(WHAT)                               \
  "h AS (INSERT INTO wf_history (instance_id, generation, what, detail) " \
  "  SELECT instance_id, generation, '" WHAT                              \
  "', jsonb_build_object('by', $2::text) "                                \
  "  FROM i) SELECT 1 FROM i"

inline constexpr pg::Statement kPause{
    "wf_pause",
    "WITH i AS (UPDATE wf_instances SET status = 'paused', generation = generation + 1, "
    "    owner = NULL, lease_expires_at = NULL, wake_at = NULL, updated_at = runledger_now() "
    "  WHERE instance_id = $1 AND status IN ('queued', 'running', 'waiting') "
    "  RETURNING instance_id, generation), " RUNLEDGER_WF_OPERATOR_HISTORY("paused")};

// Back to queued: due at once; the replay finds what it was waiting for again.
inline constexpr pg::Statement kResume{
    "wf_resume",
    "WITH i AS (UPDATE wf_instances SET status = 'queued', updated_at = runledger_now() "
    "  WHERE instance_id = $1 AND status = 'paused' RETURNING instance_id, "
    "generation), " RUNLEDGER_WF_OPERATOR_HISTORY("resumed")};

inline constexpr pg::Statement kTerminate{
    "wf_terminate",
    "WITH i AS (UPDATE wf_instances SET status = 'terminated', generation = generation + 1, "
    "    owner = NULL, lease_expires_at = NULL, wake_at = NULL, finished_at = runledger_now(), "
    "    updated_at = runledger_now() "
    "  WHERE instance_id = $1 AND status IN ('queued', 'running', 'waiting', 'paused') "
    "  RETURNING instance_id, generation), " RUNLEDGER_WF_OPERATOR_HISTORY("terminated")};

// Terminate with rollback: queued with the rollback requested (one already under way is kept),
// to end terminated once an executor has run the compensations; terminated at once when no
// compensation is owed.
inline constexpr pg::Statement kTerminateWithRollback{
    "wf_terminate_with_rollback",
    "WITH owed AS (SELECT count(*) AS n FROM wf_steps s "
    "  LEFT JOIN wf_compensations c USING (instance_id, step_key) "
    "  WHERE s.instance_id = $1 AND s.kind = 'run' AND s.state = 'succeeded' "
    "    AND s.config ? 'compensation' AND c.state IS DISTINCT FROM 'succeeded'), "
    "done AS (SELECT count(*) AS n FROM wf_compensations "
    "  WHERE instance_id = $1 AND state = 'succeeded'), "
    "i AS (UPDATE wf_instances SET generation = generation + 1, "
    "    status = CASE WHEN (SELECT n FROM owed) > 0 THEN 'queued' ELSE 'terminated' END, "
    "    finished_at = CASE WHEN (SELECT n FROM owed) > 0 THEN NULL ELSE runledger_now() END, "
    "    error = CASE WHEN (SELECT n FROM owed) > 0 THEN error ELSE jsonb_build_object("
    "      'message', 'terminated by ' || $2::text, 'kind', 'terminated', 'rollback', "
    "      jsonb_build_object('state', 'complete', 'compensated', (SELECT n FROM done))) END, "
    "    rollback = coalesce(rollback, '{}'::jsonb) || "
    "      jsonb_build_object('reason', 'terminate', 'by', $2::text), "
    "    owner = NULL, lease_expires_at = NULL, wake_at = NULL, updated_at = runledger_now() "
    "  WHERE instance_id = $1 AND status IN ('queued', 'running', 'waiting', 'paused') "
    "  RETURNING instance_id, generation, status), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, detail) "
    "  SELECT instance_id, generation, CASE status WHEN 'queued' THEN 'terminating with rollback' "
    "    ELSE 'terminated' END, jsonb_build_object('by', $2::text, 'rollback', true) FROM i) "
    "SELECT 1 FROM i"};

// Restart from step $3: discards it and every step recorded after it (their compensations with
// them), queues the instance with a fresh deadline of the same length and no rollback, and
// counts the restart. No row when the step is unknown or when an earlier, kept step was
// compensated (its effect is undone: reusing its value would be wrong).
inline constexpr pg::Statement kRestart{
    "wf_restart",
    "WITH target AS (SELECT recorded_seq FROM wf_steps WHERE instance_id = $1 AND step_key = $3 "
    "  AND NOT EXISTS (SELECT 1 FROM wf_compensations c JOIN wf_steps s USING (instance_id, "
    "    step_key) WHERE c.instance_id = $1 AND c.state = 'succeeded' "
    "    AND s.recorded_seq < wf_steps.recorded_seq)), "
    "del AS (DELETE FROM wf_steps s USING target WHERE s.instance_id = $1 "
    "  AND s.recorded_seq >= target.recorded_seq RETURNING s.step_key), "
    "i AS (UPDATE wf_instances SET status = 'queued', generation = generation + 1, "
    "    restarts = restarts + 1, owner = NULL, lease_expires_at = NULL, wake_at = NULL, "
    "    output = NULL, error = NULL, finished_at = NULL, current_step = NULL, rollback = NULL, "
    "    deadline_at = runledger_now() + (deadline_at - created_at), "
    "    updated_at = runledger_now() "
    "  WHERE instance_id = $1 AND EXISTS (SELECT 1 FROM target) "
    "  RETURNING instance_id, generation), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, step_key, detail) "
    "  SELECT instance_id, generation, 'restarted', $3, jsonb_build_object('by', $2::text, "
    "    'discarded', (SELECT count(*) FROM del)) FROM i) "
    "SELECT (SELECT count(*) FROM del) FROM i"};

// ---------------------------------------------------------------------------------------------
// Rollback

// Begins the rollback of a failing instance: $3 {"reason": "failed", "error"}.
inline constexpr pg::Statement kBeginRollback{
    "wf_begin_rollback",
    "WITH i AS (UPDATE wf_instances SET rollback = $3::jsonb, updated_at = runledger_now() "
    "  WHERE instance_id = $1 AND generation = $2 AND status = 'running' "
    "  RETURNING instance_id), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, detail) "
    "  SELECT instance_id, $2, 'rolling back', $3::jsonb FROM i) "
    "SELECT 1 FROM i"};

// The succeeded steps that name a compensation, latest recorded first, with their compensation's
// journal: step key, handler, step output, state (NULL: not started), attempts, ms until due.
inline constexpr pg::Statement kCompensable{
    "wf_compensable",
    "SELECT s.step_key, s.config->>'compensation', s.output, c.state, coalesce(c.attempts, 0), "
    "  (extract(epoch FROM c.due_at - runledger_now()) * 1000)::bigint "
    "FROM wf_steps s LEFT JOIN wf_compensations c USING (instance_id, step_key) "
    "WHERE s.instance_id = $1 AND s.kind = 'run' AND s.state = 'succeeded' "
    "  AND s.config ? 'compensation' "
    "ORDER BY s.recorded_seq DESC"};

// Records a compensation's state, fenced like a step: $3 step key, $4 handler, $5 state, $6
// attempts, $7 error, $8 due in ms (NULL: none), $9 history `what`, $10 detail. Returns whether
// its due time has passed; no row when the writer lost the instance.
inline constexpr pg::Statement kRecordCompensation{
    "wf_record_compensation",
    "WITH " RUNLEDGER_WF_OWNER
    ", "
    "c AS (INSERT INTO wf_compensations (instance_id, step_key, handler, state, attempts, error, "
    "    due_at, generation) "
    "  SELECT instance_id, $3, $4, $5, $6, $7::jsonb, "
    "    runledger_now() + make_interval(secs => $8::bigint / 1000.0), $2 FROM owner "
    "  ON CONFLICT (instance_id, step_key) DO UPDATE SET state = EXCLUDED.state, "
    "    attempts = EXCLUDED.attempts, error = EXCLUDED.error, due_at = EXCLUDED.due_at, "
    "    generation = EXCLUDED.generation, updated_at = runledger_now() "
    "  RETURNING step_key, due_at), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, step_key, detail) "
    "  SELECT $1, $2, $9, step_key, $10::jsonb FROM c) "
    "SELECT due_at IS NULL OR due_at <= runledger_now() FROM c"};

}  // namespace runledger::coordinator::sql
