// Every SQL statement of the ship ports, in one place. Private to ship/.
#pragma once

#include "pg/pg.h"

namespace runledger::ship::sql {

#define RUNLEDGER_CHANGE_COLUMNS "id, repository, branch, title, body, state, merge_sha"

// Edits the open change request of ($1 repository, $2 branch), else opens one; returns it and
// whether it was created. The partial unique index makes a concurrent second open fail instead
// of creating two.
inline constexpr pg::Statement kOpenOrUpdate{
    "ship_open_or_update",
    "WITH upd AS (UPDATE change_requests SET title = $3, body = $4, updated_at = runledger_now() "
    "  WHERE repository = $1 AND branch = $2 AND state = 'open' "
    "  RETURNING " RUNLEDGER_CHANGE_COLUMNS
    "), "
    "ins AS (INSERT INTO change_requests (repository, branch, title, body) "
    "  SELECT $1, $2, $3, $4 WHERE NOT EXISTS (SELECT 1 FROM upd) "
    "  RETURNING " RUNLEDGER_CHANGE_COLUMNS
    ") "
    "SELECT *, false FROM upd UNION ALL SELECT *, true FROM ins"};

inline constexpr pg::Statement kFindOpen{
    "ship_find_open", "SELECT " RUNLEDGER_CHANGE_COLUMNS
                      " FROM change_requests WHERE repository = $1 AND branch = $2 "
                      "AND state = 'open'"};

inline constexpr pg::Statement kGetChange{
    "ship_get_change", "SELECT " RUNLEDGER_CHANGE_COLUMNS " FROM change_requests WHERE id = $1"};

inline constexpr pg::Statement kRecordMerge{
    "ship_record_merge",
    "UPDATE change_requests SET state = 'merged', merge_sha = $2, updated_at = runledger_now() "
    "WHERE id = $1 AND state = 'open' RETURNING " RUNLEDGER_CHANGE_COLUMNS};

inline constexpr pg::Statement kApprove{
    "ship_approve",
    "UPDATE change_requests SET approved_at = coalesce(approved_at, runledger_now()), "
    "updated_at = runledger_now() WHERE id = $1 AND state = 'open' RETURNING id"};

// Open change requests of repository $1 approved at least $2 ms ago, oldest first.
inline constexpr pg::Statement kApprovedOpen{
    "ship_approved_open",
    "SELECT " RUNLEDGER_CHANGE_COLUMNS
    " FROM change_requests WHERE repository = $1 AND state = 'open' "
    "AND approved_at <= runledger_now() - make_interval(secs => $2::bigint / 1000.0) "
    "ORDER BY approved_at"};

inline constexpr pg::Statement kRecordDeploy{
    "ship_record_deploy",
    "INSERT INTO deploys (deploy_key, sha, path) VALUES ($1, $2, $3) "
    "ON CONFLICT (deploy_key) DO NOTHING RETURNING deploy_key"};

inline constexpr pg::Statement kGetDeploy{
    "ship_get_deploy", "SELECT deploy_key, sha, path FROM deploys WHERE deploy_key = $1"};

inline constexpr pg::Statement kPost{
    "ship_post",
    "INSERT INTO thread_messages (thread_key, dedupe_key, body) VALUES ($1, $2, $3) "
    "ON CONFLICT (thread_key, dedupe_key) DO NOTHING RETURNING id"};

// A page of a thread's messages, newest first: $1 the thread; $2, $3 the position of the previous
// page's last message (microseconds since the epoch, id), NULL for the first page; $4 the rows to
// fetch (the page's limit + 1). The row comparison is the index condition of
// thread_messages_by_thread_created (migration 0015): one backward index scan from the position.
// (created_text: an output column named created_at would be what ORDER BY sorts, as text.)
inline constexpr pg::Statement kMessagesPage{"ship_messages_page", R"sql(
  SELECT id, thread_key, dedupe_key, body, created_at::text AS created_text,
         (extract(epoch FROM created_at) * 1000000)::bigint AS position_at
  FROM thread_messages
  WHERE thread_key = $1 AND (created_at, id) < (
    coalesce('epoch'::timestamptz + $2::bigint * interval '1 microsecond', 'infinity'),
    coalesce($3::bigint, 9223372036854775807))
  ORDER BY created_at DESC, id DESC LIMIT $4
)sql"};

inline constexpr pg::Statement kAllows{
    "ship_allows", "SELECT 1 FROM requester_capabilities WHERE requester = $1 AND capability = $2"};

inline constexpr pg::Statement kGrant{
    "ship_grant",
    "INSERT INTO requester_capabilities (requester, capability) VALUES ($1, $2) "
    "ON CONFLICT DO NOTHING"};

inline constexpr pg::Statement kRevoke{
    "ship_revoke", "DELETE FROM requester_capabilities WHERE requester = $1 AND capability = $2"};

}  // namespace runledger::ship::sql
