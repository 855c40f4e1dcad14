// Every SQL statement of the transcript module, in one place. Private to transcript/.
//
// Fencing: an append UPDATEs the run row (guarded by generation and status), which takes the row
// lock a claim also needs; an intent or a completion locks the run row FOR SHARE in the same
// statement. Either way a claim that commits first makes the write find no row, and a write that
// commits first is visible to the claimer (see ledger/statements.h).
#pragma once

#include "pg/pg.h"

namespace runledger::transcript::sql {

// The head update of an append of (KIND, BODY): moves the run's head to the next seq and its
// chained hash, guarded by $1 run and $2 generation. The entry insert that follows reads `head`.
#define RUNLEDGER_HEAD_UPDATE(KIND, BODY)                                                  \
  "UPDATE live_runs r SET transcript_seq = r.transcript_seq + 1, "                         \
  "  transcript_sha256 = sha256(r.transcript_sha256 || int8send(r.transcript_seq + 1) || " \
  "    convert_to(" KIND "::text, 'UTF8') || '\\x00'::bytea || " BODY                      \
  "::bytea) "                                                                              \
  "WHERE r.run_id = $1::uuid AND r.generation = $2 AND r.status = 'running' "

// What the entry insert reads from `head` (never r.*: the row carries the system prompt and the
// profile, which every append would otherwise copy).
#define RUNLEDGER_HEAD_RETURNING \
  "RETURNING r.run_id, r.transcript_seq, r.transcript_sha256, r.generation"

#define RUNLEDGER_INSERT_ENTRY(KIND, BODY)                                        \
  "INSERT INTO transcript_entries (run_id, seq, generation, kind, body, sha256) " \
  "SELECT run_id, transcript_seq, generation, " KIND ", " BODY                    \
  "::bytea, transcript_sha256 FROM head "

// Intents: $3 the highest step_no among them, $4 a JSON array of {step_no, tool, call_id, args}.
#define RUNLEDGER_INTENTS                                    \
  "intents AS (SELECT * FROM jsonb_to_recordset($4::jsonb) " \
  "  AS i(step_no bigint, tool text, call_id text, args jsonb)) "

// The run's budget admits intents up to step $3 now.
#define RUNLEDGER_WITHIN_BUDGET           \
  "AND $3::bigint <= r.budget_max_steps " \
  "AND r.created_at + make_interval(secs => r.budget_wall_s) > runledger_now() "

// Inserts `intents` for the run in `owner`; a duplicate step_no fails the whole statement.
#define RUNLEDGER_INSERT_INTENTS                                                             \
  "INSERT INTO run_steps (run_id, step_no, intent_generation, tool, call_id, args, "         \
  "  effect_key) "                                                                           \
  "SELECT o.run_id, i.step_no, $2, i.tool, i.call_id, i.args, o.run_id || '/' || i.step_no " \
  "FROM owner o CROSS JOIN intents i "

// The head update admits only an append as entry $N when $N is not NULL (an HTTP client's
// expected_seq): a repeated request then changes nothing.
#define RUNLEDGER_AT_SEQ(N) "AND (" N "::bigint IS NULL OR r.transcript_seq = " N "::bigint - 1) "

inline constexpr pg::Statement kAppend{
    "transcript_append",
    "WITH head AS (" RUNLEDGER_HEAD_UPDATE("$3", "$4") RUNLEDGER_AT_SEQ("$5")
        RUNLEDGER_HEAD_RETURNING ") " RUNLEDGER_INSERT_ENTRY("$3", "$4") "RETURNING seq, sha256"};

// What decides whether the entry at $2 is the one a repeated append would write: its kind,
// generation and chain hash, and the hash before it.
inline constexpr pg::Statement kEntryIdentity{"transcript_entry_identity", R"sql(
  SELECT e.kind, e.generation, e.sha256,
         coalesce(p.sha256, decode(repeat('00', 32), 'hex'))
           AS previous
  FROM transcript_entries e
  LEFT JOIN transcript_entries p ON p.run_id = e.run_id AND p.seq = e.seq - 1
  WHERE e.run_id = $1::uuid AND e.seq = $2
)sql"};

// Intents alone: refused as a whole (no row) when $2 does not own the run or the budget is spent.
inline constexpr pg::Statement kBeginSteps{"transcript_begin_steps",
                                           "WITH " RUNLEDGER_INTENTS
                                           ", owner AS (SELECT r.run_id FROM live_runs r "
                                           "  WHERE r.run_id = $1::uuid AND r.generation = $2 AND "
                                           "r.status = 'running' " RUNLEDGER_WITHIN_BUDGET
                                           "FOR SHARE) " RUNLEDGER_INSERT_INTENTS
                                           "ORDER BY i.step_no RETURNING effect_key"};

// The assistant turn ($5) and its intents in one statement. Returns the turn's seq (NULL when
// refused) and the effect keys in step order.
inline constexpr pg::Statement kAppendTurn{
    "transcript_append_turn",
    "WITH " RUNLEDGER_INTENTS ", head AS (" RUNLEDGER_HEAD_UPDATE("'assistant'", "$5")
    RUNLEDGER_WITHIN_BUDGET RUNLEDGER_AT_SEQ("$6") RUNLEDGER_HEAD_RETURNING "), "
    "entry AS (" RUNLEDGER_INSERT_ENTRY("'assistant'", "$5") "RETURNING seq), "
    "owner AS (SELECT run_id FROM head), "
    "steps AS (" RUNLEDGER_INSERT_INTENTS "RETURNING step_no, effect_key) "
    "SELECT (SELECT seq FROM entry) AS seq, "
    "  (SELECT coalesce(jsonb_agg(effect_key ORDER BY step_no), '[]') FROM steps)::text AS keys"};

// A completion: $3 step_no, $4 state, $5 result (bytea or NULL), $6 error; OWNER is a FROM item
// yielding the run's row only while $2 owns it, locked; EXTRA more assignments.
#define RUNLEDGER_COMPLETE_STEP(OWNER, EXTRA)                                    \
  "UPDATE run_steps s SET state = $4, result = $5::bytea, error = $6, "          \
  "  result_generation = $2, finished_at = runledger_now() " EXTRA "FROM " OWNER \
  " o WHERE s.run_id = o.run_id AND s.step_no = $3 AND s.state = 'intent' "

#define RUNLEDGER_OWNED_RUN(LOCK)                                                              \
  "(SELECT run_id, transcript_seq FROM live_runs WHERE run_id = $1::uuid AND generation = $2 " \
  "  AND status = 'running' " LOCK ")"

inline constexpr pg::Statement kCompleteStep{
    "transcript_complete_step",
    RUNLEDGER_COMPLETE_STEP(RUNLEDGER_OWNED_RUN("FOR SHARE"), "") "RETURNING s.step_no"};

// The tool_result entry (body BODY) of the step `step` just updated, moving the head only if that
// update landed; `owned` holds the run row FOR NO KEY UPDATE from the start (not FOR SHARE: two
// concurrent writes of one run holding FOR SHARE would deadlock upgrading it for the head).
#define RUNLEDGER_APPEND_RESULT_OF_STEP(BODY)                                            \
  "head AS (" RUNLEDGER_HEAD_UPDATE(                                                     \
      "'tool_result'", BODY) "AND EXISTS (SELECT 1 FROM step) " RUNLEDGER_HEAD_RETURNING \
                             ") " RUNLEDGER_INSERT_ENTRY("'tool_result'", BODY) "RETURNING seq"

// A completion and its tool_result entry ($7), one statement; a refused completion writes
// nothing. $8: the settlement record (NULL outside settlement).
inline constexpr pg::Statement kCompleteWithResult{
    "transcript_complete_with_result",
    "WITH owned AS " RUNLEDGER_OWNED_RUN("FOR NO KEY UPDATE") ", "
    "step AS (" RUNLEDGER_COMPLETE_STEP(
        "owned", ", result_seq = o.transcript_seq + 1, settlement = coalesce($8::jsonb, "
                 "s.settlement) ")
    "RETURNING s.step_no), "
    RUNLEDGER_APPEND_RESULT_OF_STEP("$7")};

// The tool_result entry ($4) of a completed step whose result never reached the transcript. $5:
// the settlement record (NULL outside settlement).
inline constexpr pg::Statement kAppendToolResult{
    "transcript_append_tool_result",
    "WITH owned AS " RUNLEDGER_OWNED_RUN("FOR NO KEY UPDATE") ", "
    "step AS (UPDATE run_steps s SET result_seq = o.transcript_seq + 1, "
    "  settlement = coalesce($5::jsonb, s.settlement) "
    "  FROM owned o WHERE s.run_id = o.run_id AND s.step_no = $3 AND s.state <> 'intent' "
    "    AND s.result_seq IS NULL RETURNING s.step_no), "
    RUNLEDGER_APPEND_RESULT_OF_STEP("$4")};

// Records how settlement handled a step still in flight that the run's holder will run again
// (over HTTP the bot re-runs it): the step stays an intent.
inline constexpr pg::Statement kRecordSettlement{
    "transcript_record_settlement",
    "UPDATE run_steps s SET settlement = $4::jsonb FROM " RUNLEDGER_OWNED_RUN("FOR SHARE")
    " o WHERE s.run_id = o.run_id AND s.step_no = $3 AND s.state = 'intent' RETURNING s.step_no"};

// For a page of runs: each one's transcript head and how many steps it has.
inline constexpr pg::Statement kRunRecords{"transcript_run_records", R"sql(
  SELECT r.run_id, r.transcript_seq, r.transcript_sha256,
         (SELECT count(*) FROM run_steps s WHERE s.run_id = r.run_id) AS steps
  FROM live_runs r WHERE r.run_id = ANY($1::uuid[])
)sql"};

inline constexpr pg::Statement kHeadSeqs{
    "transcript_head_seqs",
    "SELECT run_id, transcript_seq FROM live_runs WHERE run_id = ANY($1::uuid[])"};

inline constexpr pg::Statement kHead{
    "transcript_head",
    "SELECT transcript_seq, transcript_sha256 FROM live_runs WHERE run_id = $1::uuid"};

inline constexpr pg::Statement kSystemPrompt{
    "transcript_system_prompt", "SELECT system_prompt FROM live_runs WHERE run_id = $1::uuid"};

// A page of entries from $2; bodies up to $3 bytes come inline, larger ones by slices.
inline constexpr pg::Statement kReadPage{"transcript_read_page", R"sql(
  SELECT seq, generation, kind, sha256, octet_length(body) AS length, created_at,
         CASE WHEN octet_length(body) <= $3 THEN body END AS body
  FROM transcript_entries WHERE run_id = $1::uuid AND seq >= $2
  ORDER BY seq LIMIT $4
)sql"};

// 1-based byte offset $3, length $4 (STORAGE EXTERNAL: only the needed chunks are read).
inline constexpr pg::Statement kReadSlice{
    "transcript_read_slice",
    "SELECT substring(body FROM $3 FOR $4) FROM transcript_entries "
    "WHERE run_id = $1::uuid AND seq = $2"};

// The columns step_from_row() reads.
#define RUNLEDGER_STEP_COLUMNS                                                                 \
  "SELECT step_no, intent_generation, result_generation, tool, call_id, args::text AS args, "  \
  "effect_key, state, result, error, settlement::text AS settlement, result_seq, started_at, " \
  "finished_at FROM run_steps "

inline constexpr pg::Statement kSteps{
    "transcript_steps", RUNLEDGER_STEP_COLUMNS "WHERE run_id = $1::uuid ORDER BY step_no"};

inline constexpr pg::Statement kStep{
    "transcript_step", RUNLEDGER_STEP_COLUMNS "WHERE run_id = $1::uuid AND step_no = $2"};

inline constexpr pg::Statement kWallSpent{
    "transcript_wall_spent",
    "SELECT created_at + make_interval(secs => budget_wall_s) <= runledger_now() "
    "FROM live_runs WHERE run_id = $1::uuid"};

inline constexpr pg::Statement kLastEntryOfKind{"transcript_last_entry_of_kind", R"sql(
  SELECT seq, generation, kind, sha256, body, created_at FROM transcript_entries
  WHERE run_id = $1::uuid AND kind = $2 ORDER BY seq DESC LIMIT 1
)sql"};

inline constexpr pg::Statement kCountEntriesOfKind{
    "transcript_count_entries_of_kind",
    "SELECT count(*) FROM transcript_entries WHERE run_id = $1::uuid AND kind = $2"};

// The head from the run row, and the count and total size of its entries: octet_length() of a
// body stored out of line reads its size from the TOAST pointer, not the body.
inline constexpr pg::Statement kSummary{"transcript_summary", R"sql(
  SELECT r.transcript_seq, r.transcript_sha256, e.entries, e.bytes
  FROM live_runs r,
       LATERAL (SELECT count(*) AS entries, coalesce(sum(octet_length(body)), 0) AS bytes
                FROM transcript_entries WHERE run_id = r.run_id) e
  WHERE r.run_id = $1::uuid
)sql"};

// A page of the run's steps after step $2 (NULL: from the first), $3 rows (the page's limit + 1):
// a range scan of run_steps' primary key (run_id, step_no).
inline constexpr pg::Statement kStepTimeline{"transcript_step_timeline", R"sql(
  SELECT step_no, tool, call_id, effect_key, state, intent_generation, result_generation,
         settlement::text AS settlement, started_at, finished_at
  FROM run_steps WHERE run_id = $1::uuid AND step_no > coalesce($2::bigint, 0)
  ORDER BY step_no LIMIT $3
)sql"};

inline constexpr pg::Statement kNextStepNo{
    "transcript_next_step_no",
    "SELECT coalesce(max(step_no), 0) + 1 FROM run_steps WHERE run_id = $1::uuid"};

#undef RUNLEDGER_AT_SEQ
#undef RUNLEDGER_HEAD_UPDATE
#undef RUNLEDGER_INSERT_ENTRY
#undef RUNLEDGER_HEAD_RETURNING
#undef RUNLEDGER_INTENTS
#undef RUNLEDGER_WITHIN_BUDGET
#undef RUNLEDGER_INSERT_INTENTS
#undef RUNLEDGER_COMPLETE_STEP
#undef RUNLEDGER_OWNED_RUN
#undef RUNLEDGER_STEP_COLUMNS
#undef RUNLEDGER_APPEND_RESULT_OF_STEP

}  // namespace runledger::transcript::sql
