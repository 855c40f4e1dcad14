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
  "finished_at::text"

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

inline constexpr pg::Statement kGet{
    "wf_get", "SELECT " RUNLEDGER_WF_INSTANCE_COLUMNS " FROM wf_instances WHERE instance_id = $1"};

inline constexpr pg::Statement kList{"wf_list",
                                     "SELECT " RUNLEDGER_WF_INSTANCE_COLUMNS
                                     " FROM wf_instances WHERE ($1::text IS NULL OR status = $1) "
                                     "ORDER BY created_at DESC, instance_id LIMIT $2"};

#define RUNLEDGER_WF_STEP_COLUMNS \
  "step_key, kind, state, attempts, config, output, error, due_at::text, generation"

inline constexpr pg::Statement kSteps{
    "wf_steps", "SELECT " RUNLEDGER_WF_STEP_COLUMNS
                " FROM wf_steps WHERE instance_id = $1 ORDER BY created_at, step_key"};

inline constexpr pg::Statement kHistory{
    "wf_history",
    "SELECT id, at::text, generation, what, step_key, detail FROM wf_history "
    "WHERE instance_id = $1 ORDER BY id"};

// $4 dedupe key. Returns the event id; no row when the key was used already.
inline constexpr pg::Statement kSendEvent{
    "wf_send_event",
    "INSERT INTO wf_events (instance_id, event_type, payload, dedupe_key) "
    "SELECT instance_id, $2, $3::jsonb, $4 FROM wf_instances WHERE instance_id = $1 "
    "ON CONFLICT (instance_id, dedupe_key) DO NOTHING RETURNING event_id"};

inline constexpr pg::Statement kExists{"wf_exists",
                                       "SELECT 1 FROM wf_instances WHERE instance_id = $1"};

// Claims the oldest due instance of workflows $2 (a JSON array of {name, version}) for executor $1
// with a lease of $3 ms. Returns the instance, the event count, the time left to its deadline, and
// its step record with each step's time left until due (ms on the database clock; NULL: no due
// time).
inline constexpr pg::Statement kClaim{
    "wf_claim",
    "WITH picked AS (SELECT instance_id, status AS was FROM wf_instances "
    "  WHERE status IN ('queued', 'waiting', 'running') AND " RUNLEDGER_WF_DUE
    " <= runledger_now() "
    "    AND EXISTS (SELECT 1 FROM jsonb_to_recordset($2::jsonb) AS w(name text, version int) "
    "      WHERE w.name = workflow AND w.version = wf_instances.version) "
    "  ORDER BY " RUNLEDGER_WF_DUE
    " LIMIT 1 FOR UPDATE SKIP LOCKED), "
    "claimed AS (UPDATE wf_instances i SET status = 'running', generation = i.generation + 1, "
    "    owner = $1, lease_expires_at = runledger_now() + make_interval(secs => $3::bigint / "
    "1000.0), "
    "    wake_at = NULL, updated_at = runledger_now() "
    "  FROM picked WHERE i.instance_id = picked.instance_id "
    "  RETURNING i.instance_id, i.workflow, i.version, i.input, i.generation, i.event_seq, "
    "    i.restarts, "
    "    (extract(epoch FROM i.deadline_at - runledger_now()) * 1000)::bigint AS deadline_in_ms, "
    "    picked.was), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, detail) "
    "  SELECT instance_id, generation, 'taken over', jsonb_build_object('executor', $1::text) "
    "  FROM claimed WHERE was = 'running') "
    "SELECT c.instance_id, c.workflow, c.version, c.input, c.generation, c.event_seq, c.restarts, "
    "  c.deadline_in_ms, "
    "  (SELECT coalesce(jsonb_agg(jsonb_build_object('step_key', s.step_key, 'kind', s.kind, "
    "     'state', s.state, 'attempts', s.attempts, 'config', s.config, 'output', s.output, "
    "     'error', s.error, 'due_in_ms', "
    "     (extract(epoch FROM s.due_at - runledger_now()) * 1000)::bigint)), "
    "     '[]'::jsonb) "
    "   FROM wf_steps s WHERE s.instance_id = c.instance_id) AS steps "
    "FROM claimed c"};

// The earliest due time of a workflow in $1, as milliseconds from now (negative: overdue).
inline constexpr pg::Statement kNextDue{
    "wf_next_due",
    "SELECT (extract(epoch FROM min(" RUNLEDGER_WF_DUE
    ") - runledger_now()) * 1000)::bigint "
    "FROM wf_instances WHERE status IN ('queued', 'waiting', 'running') "
    "  AND EXISTS (SELECT 1 FROM jsonb_to_recordset($1::jsonb) AS w(name text, version int) "
    "    WHERE w.name = workflow AND w.version = wf_instances.version)"};

// Records a step's terminal or pending state: $3 key, $4 kind, $5 config, $6 state, $7 attempts,
// $8 output, $9 error, $10 due in ms from now (NULL: none), $11 history `what`, $12 detail.
// A step already final is left alone (no row). Returns whether its due time has passed.
inline constexpr pg::Statement kRecordStep{
    "wf_record_step",
    "WITH " RUNLEDGER_WF_OWNER
    ", "
    "s AS (INSERT INTO wf_steps (instance_id, step_key, kind, config, state, attempts, output, "
    "    error, due_at, generation) "
    "  SELECT instance_id, $3, $4, $5::jsonb, $6, $7, $8::jsonb, $9::jsonb, "
    "    runledger_now() + make_interval(secs => $10::bigint / 1000.0), $2 FROM owner "
    "  ON CONFLICT (instance_id, step_key) DO UPDATE SET state = EXCLUDED.state, "
    "    attempts = EXCLUDED.attempts, output = EXCLUDED.output, error = EXCLUDED.error, "
    "    due_at = EXCLUDED.due_at, generation = EXCLUDED.generation, updated_at = "
    "runledger_now() "
    "  WHERE wf_steps.state = 'pending' "
    "  RETURNING step_key, due_at), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, step_key, detail) "
    "  SELECT $1, $2, $11, step_key, $12::jsonb FROM s) "
    "SELECT due_at IS NULL OR due_at <= runledger_now() FROM s"};

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

// A wait ($3 key, $4 type, $5 match, $6 config, $7 timeout ms): takes the oldest unconsumed
// matching event, recording the wait as succeeded with its payload, or as pending with its
// timeout when none is there (a wait already recorded keeps its timeout). Returns whether the
// writer owns the instance, and the payload taken (NULL: none).
inline constexpr pg::Statement kWait{
    "wf_wait",
    "WITH " RUNLEDGER_WF_OWNER
    ", "
    "ev AS (SELECT e.event_id, e.payload FROM wf_events e JOIN owner o USING (instance_id) "
    "  WHERE e.consumed_by IS NULL AND e.event_type = $4 AND e.payload @> $5::jsonb "
    "  ORDER BY e.event_id LIMIT 1 FOR UPDATE OF e SKIP LOCKED), "
    "used AS (UPDATE wf_events e SET consumed_by = $3, consumed_at = runledger_now() "
    "  FROM ev WHERE e.event_id = ev.event_id RETURNING e.event_id, e.event_type, e.payload), "
    "st AS (INSERT INTO wf_steps (instance_id, step_key, kind, config, state, due_at, output, "
    "    generation) "
    "  SELECT o.instance_id, $3, 'wait', $6::jsonb, "
    "    CASE WHEN u.event_id IS NULL THEN 'pending' ELSE 'succeeded' END, "
    "    runledger_now() + make_interval(secs => $7::bigint / 1000.0), u.payload, $2 "
    "  FROM owner o LEFT JOIN used u ON true "
    "  ON CONFLICT (instance_id, step_key) DO UPDATE SET state = EXCLUDED.state, "
    "    output = EXCLUDED.output, generation = EXCLUDED.generation, updated_at = "
    "runledger_now() "
    "  WHERE wf_steps.state = 'pending' AND EXCLUDED.state = 'succeeded' RETURNING step_key), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, step_key, detail) "
    "  SELECT $1, $2, 'event received', $3, jsonb_build_object('event_id', event_id, 'type', "
    "    event_type) FROM used) "
    "SELECT (SELECT count(*) FROM owner), (SELECT payload FROM used)"};

// The replay stopped at step $4, which is not due: the instance waits until the step's due time
// (never past its deadline), or is due at once when an event arrived since the claim ($3 the
// event count the claim saw).
inline constexpr pg::Statement kSuspend{
    "wf_suspend",
    "WITH i AS (UPDATE wf_instances SET status = 'waiting', owner = NULL, lease_expires_at = NULL, "
    "    wake_at = CASE WHEN event_seq <> $3 THEN runledger_now() "
    "      ELSE least(coalesce((SELECT due_at FROM wf_steps s WHERE s.instance_id = $1 "
    "        AND s.step_key = $4), runledger_now()), deadline_at) END, "
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

// Extends by $2 ms the leases of $1, a JSON array of {instance_id, generation}; returns those
// still held.
inline constexpr pg::Statement kHeartbeat{
    "wf_heartbeat",
    "UPDATE wf_instances i SET lease_expires_at = runledger_now() + make_interval(secs => "
    "$2::bigint / 1000.0) "
    "FROM jsonb_to_recordset($1::jsonb) AS h(instance_id text, generation bigint) "
    "WHERE i.instance_id = h.instance_id AND i.generation = h.generation AND i.status = "
    "'running' "
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

// Restart from step $3: discards it and every step recorded after it, queues the instance with
// a fresh deadline of the same length, and counts the restart. No row when the step is unknown.
inline constexpr pg::Statement kRestart{
    "wf_restart",
    "WITH target AS (SELECT recorded_seq FROM wf_steps WHERE instance_id = $1 AND step_key = $3), "
    "del AS (DELETE FROM wf_steps s USING target WHERE s.instance_id = $1 "
    "  AND s.recorded_seq >= target.recorded_seq RETURNING s.step_key), "
    "i AS (UPDATE wf_instances SET status = 'queued', generation = generation + 1, "
    "    restarts = restarts + 1, owner = NULL, lease_expires_at = NULL, wake_at = NULL, "
    "    output = NULL, error = NULL, finished_at = NULL, current_step = NULL, "
    "    deadline_at = runledger_now() + (deadline_at - created_at), "
    "    updated_at = runledger_now() "
    "  WHERE instance_id = $1 AND EXISTS (SELECT 1 FROM target) "
    "  RETURNING instance_id, generation), "
    "h AS (INSERT INTO wf_history (instance_id, generation, what, step_key, detail) "
    "  SELECT instance_id, generation, 'restarted', $3, jsonb_build_object('by', $2::text, "
    "    'discarded', (SELECT count(*) FROM del)) FROM i) "
    "SELECT (SELECT count(*) FROM del) FROM i"};

}  // namespace runledger::coordinator::sql
