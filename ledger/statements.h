// Every SQL statement of the ledger, in one place. Private to ledger/.
//
// Owner writes are guarded by `generation = $g AND status = 'running'` inside an UPDATE of the
// run row (which takes the row lock, and which READ COMMITTED re-checks against the newest row
// version after waiting for a concurrent claim), or by a FOR SHARE lock of the run row taken in
// the same transaction before the write. Claims lock their rows FOR NO KEY UPDATE, the lock an
// UPDATE takes anyway. A plain WHERE check, or FOR KEY SHARE (which does not conflict with FOR NO
// KEY UPDATE), lets a stale write commit after a concurrent claim; tests/ledger/fencing_test.cc
// fails for both.
#pragma once

#include "pg/pg.h"

namespace runledger::ledger::sql {

// The columns run_from_row() reads: everything but the system prompt and the transcript head.
#define RUNLEDGER_RUN_COLUMNS                                                                 \
  "run_id, dispatch_key, thread_key, parent_run_id, parent_instance_id, depth, requester, "   \
  "profile, status, generation, owner_slot, owner_incarnation, lease_expires_at, takeovers, " \
  "budget_wall_s, budget_max_steps, created_at, claimed_at, finished_at, result, input"
#define RUNLEDGER_R_RUN_COLUMNS                                                              \
  "r.run_id, r.dispatch_key, r.thread_key, r.parent_run_id, r.parent_instance_id, r.depth, " \
  "r.requester, r.profile, r.status, r.generation, r.owner_slot, r.owner_incarnation, "      \
  "r.lease_expires_at, r.takeovers, r.budget_wall_s, r.budget_max_steps, r.created_at, "     \
  "r.claimed_at, r.finished_at, r.result, r.input"

// $1 lease milliseconds, as used by every statement that sets a lease.
#define RUNLEDGER_LEASE_END "runledger_now() + make_interval(secs => $1::bigint / 1000.0)"

inline constexpr pg::Statement kInsertRun{"ledger_insert_run", R"sql(
  INSERT INTO live_runs (dispatch_key, thread_key, requester, profile, budget_wall_s,
                         budget_max_steps, parent_run_id, parent_instance_id, depth,
                         system_prompt, input)
  VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7::uuid, $8, $9, nullif($10::bytea, ''::bytea),
          $11::jsonb)
  ON CONFLICT (dispatch_key) DO NOTHING
  RETURNING )sql" RUNLEDGER_RUN_COLUMNS};

inline constexpr pg::Statement kRunByDispatchKey{"ledger_run_by_dispatch_key",
                                                 "SELECT " RUNLEDGER_RUN_COLUMNS
                                                 " FROM live_runs WHERE dispatch_key = $1"};

inline constexpr pg::Statement kLiveRunInThread{
    "ledger_live_run_in_thread",
    "SELECT run_id FROM live_runs WHERE thread_key = $1 AND status IN ('queued', 'running')"};

// Serializes fan-out checks of one parent run with its children's inserts.
inline constexpr pg::Statement kLockParentRun{
    "ledger_lock_parent_run",
    "SELECT depth, status FROM live_runs WHERE run_id = $1 FOR NO KEY UPDATE"};

// The same for a parent instance, which has no row in this module.
inline constexpr pg::Statement kLockParentInstance{
    "ledger_lock_parent_instance",
    "SELECT pg_advisory_xact_lock(hashtextextended('runledger.fanout:' || $1, 0))"};

inline constexpr pg::Statement kLiveChildrenOfRun{
    "ledger_live_children_of_run",
    "SELECT count(*) FROM live_runs WHERE parent_run_id = $1 AND status IN ('queued', 'running')"};

inline constexpr pg::Statement kLiveChildrenOfInstance{
    "ledger_live_children_of_instance",
    "SELECT count(*) FROM live_runs WHERE parent_instance_id = $1 "
    "AND status IN ('queued', 'running')"};

// Claims. `taken_over`: the run was running under another owner (whose lease expired, or whose
// slot was taken over), so it may have a tool call in flight.
// The update every claim makes of the rows it picked (CTE `pick`: run_id, old_status).
#define RUNLEDGER_CLAIM_PICKED                                                               \
  "UPDATE live_runs r SET status = 'running', generation = r.generation + 1, "               \
  "  owner_slot = $2, owner_incarnation = $3::uuid, lease_expires_at = " RUNLEDGER_LEASE_END \
  ", claimed_at = runledger_now(), "                                                         \
  "  takeovers = r.takeovers + (pick.old_status = 'running')::int "                          \
  "FROM pick WHERE r.run_id = pick.run_id "                                                  \
  "RETURNING " RUNLEDGER_R_RUN_COLUMNS ", pick.old_status = 'running' AS taken_over"

inline constexpr pg::Statement kClaimNext{"ledger_claim_next", R"sql(
  WITH pick AS (
    SELECT run_id, status AS old_status FROM live_runs
    WHERE status IN ('queued', 'running')
      AND coalesce(lease_expires_at, '-infinity'::timestamptz) < runledger_now()
    ORDER BY coalesce(lease_expires_at, '-infinity'::timestamptz), created_at
    LIMIT $4
    FOR NO KEY UPDATE SKIP LOCKED)
)sql" RUNLEDGER_CLAIM_PICKED};

// The same, for runs whose owner's lease expired only (no queued runs): a booting process
// reclaims those before it takes new work.
inline constexpr pg::Statement kClaimExpired{"ledger_claim_expired", R"sql(
  WITH pick AS (
    SELECT run_id, status AS old_status FROM live_runs
    WHERE status IN ('queued', 'running')
      AND coalesce(lease_expires_at, '-infinity'::timestamptz) < runledger_now()
      AND status = 'running'
    ORDER BY coalesce(lease_expires_at, '-infinity'::timestamptz), created_at
    LIMIT $4
    FOR NO KEY UPDATE SKIP LOCKED)
)sql" RUNLEDGER_CLAIM_PICKED};

// Waits for in-flight writes to the run (no SKIP LOCKED).
inline constexpr pg::Statement kClaimOne{"ledger_claim_one", R"sql(
  WITH pick AS (
    SELECT run_id, status AS old_status FROM live_runs
    WHERE run_id = $4::uuid
      AND (status = 'queued' OR (status = 'running' AND lease_expires_at < runledger_now()))
    FOR NO KEY UPDATE)
)sql" RUNLEDGER_CLAIM_PICKED};

// Waits for row locks (no SKIP LOCKED): the predecessor is dead, its runs must all be taken now.
inline constexpr pg::Statement kTakeOverSlot{"ledger_take_over_slot", R"sql(
  WITH pick AS (
    SELECT run_id, status AS old_status FROM live_runs
    WHERE status = 'running' AND owner_slot = $2 AND owner_incarnation <> $3::uuid
    ORDER BY created_at
    LIMIT $4
    FOR NO KEY UPDATE)
)sql" RUNLEDGER_CLAIM_PICKED};

// $2 run ids, $3 generations (parallel arrays), $4 owner slot, $5 owner incarnation.
inline constexpr pg::Statement kHeartbeat{"ledger_heartbeat", R"sql(
  UPDATE live_runs r SET lease_expires_at = )sql" RUNLEDGER_LEASE_END R"sql(
  FROM unnest($2::uuid[], $3::bigint[]) AS h(run_id, generation)
  WHERE r.run_id = h.run_id AND r.generation = h.generation AND r.status = 'running'
    AND r.owner_slot = $4 AND r.owner_incarnation = $5::uuid
  RETURNING r.run_id, r.lease_expires_at
)sql"};

inline constexpr pg::Statement kFinish{"ledger_finish", R"sql(
  UPDATE live_runs
  SET status = $3, result = $4::jsonb, finished_at = runledger_now(), lease_expires_at = NULL
  WHERE run_id = $1::uuid AND generation = $2 AND status = 'running'
  RETURNING run_id
)sql"};

inline constexpr pg::Statement kRelease{"ledger_release", R"sql(
  UPDATE live_runs
  SET status = 'queued', lease_expires_at = NULL, owner_slot = NULL, owner_incarnation = NULL
  WHERE run_id = $1::uuid AND generation = $2 AND status = 'running'
  RETURNING run_id
)sql"};

// The guard of write_fenced(): FOR SHARE conflicts with a claim's row lock, so the claim waits
// for this transaction (or this statement waits for the claim and then finds no row).
inline constexpr pg::Statement kFenceShare{"ledger_fence_share", R"sql(
  SELECT 1 FROM live_runs
  WHERE run_id = $1::uuid AND generation = $2 AND status = 'running'
  FOR SHARE
)sql"};

inline constexpr pg::Statement kCancel{"ledger_cancel", R"sql(
  UPDATE live_runs
  SET status = 'cancelled', generation = generation + 1, lease_expires_at = NULL,
      finished_at = runledger_now(), result = jsonb_build_object('cancelled_by', $2::text)
  WHERE run_id = $1::uuid AND status IN ('queued', 'running')
  RETURNING run_id
)sql"};

inline constexpr pg::Statement kGetRun{
    "ledger_get_run", "SELECT " RUNLEDGER_RUN_COLUMNS " FROM live_runs WHERE run_id = $1::uuid"};

// Optional filters are NULL when absent.
inline constexpr pg::Statement kListRuns{"ledger_list_runs", "SELECT " RUNLEDGER_RUN_COLUMNS R"sql(
  FROM live_runs
  WHERE ($1::text IS NULL OR status = $1)
    AND ($2::text IS NULL OR thread_key = $2)
    AND ($3::uuid IS NULL OR parent_run_id = $3)
    AND ($4::text IS NULL OR parent_instance_id = $4)
  ORDER BY created_at DESC, run_id
  LIMIT $5
)sql"};

// Pages of runs newest first, by one key: $1 the key's value; $2, $3 the position of the previous
// page's last row (microseconds since the epoch, run id), NULL for the first page; $4 the rows to
// fetch (the page's limit + 1). With the key in front of live_runs_by_<key>_created (migration
// 0015), the row comparison is the index condition: one backward index scan from the position,
// no sort, whatever the plan's parameters (tests/ledger/reads_test.cc checks the generic plan).
// position_at is what the next page's cursor carries.
#define RUNLEDGER_RUNS_PAGE(KEY)                                                           \
  "SELECT " RUNLEDGER_RUN_COLUMNS                                                          \
  ", (extract(epoch FROM created_at) * 1000000)::bigint AS position_at FROM live_runs "    \
  "WHERE " KEY                                                                             \
  " = $1 AND (created_at, run_id) < ("                                                     \
  "  coalesce('epoch'::timestamptz + $2::bigint * interval '1 microsecond', 'infinity'), " \
  "  coalesce($3::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff')) "                         \
  "ORDER BY created_at DESC, run_id DESC LIMIT $4"

inline constexpr pg::Statement kRunsWithStatus{"ledger_runs_with_status",
                                               RUNLEDGER_RUNS_PAGE("status")};
inline constexpr pg::Statement kRunsInThread{"ledger_runs_in_thread",
                                             RUNLEDGER_RUNS_PAGE("thread_key")};
inline constexpr pg::Statement kRunsOfRequester{"ledger_runs_of_requester",
                                                RUNLEDGER_RUNS_PAGE("requester")};

// A scan of the whole table: retention keeps it to a week of runs, and the service asks once a
// minute.
inline constexpr pg::Statement kStatuses{
    "ledger_statuses", "SELECT run_id, status FROM live_runs WHERE run_id = ANY($1::uuid[])"};

inline constexpr pg::Statement kCountByStatus{
    "ledger_count_by_status", "SELECT status, count(*) FROM live_runs GROUP BY status"};

// Children keep their rows (their parent_run_id foreign key is SET NULL); the run's steps and
// transcript entries go in the same statement (migration 0013's trigger).
inline constexpr pg::Statement kSweepBatch{"ledger_sweep_batch", R"sql(
  DELETE FROM live_runs WHERE run_id IN (
    SELECT run_id FROM live_runs
    WHERE finished_at < runledger_now() - make_interval(secs => $1::bigint)
    LIMIT $2)
)sql"};

#undef RUNLEDGER_RUNS_PAGE
#undef RUNLEDGER_LEASE_END
#undef RUNLEDGER_CLAIM_PICKED
#undef RUNLEDGER_RUN_COLUMNS
#undef RUNLEDGER_R_RUN_COLUMNS

}  // namespace runledger::ledger::sql
