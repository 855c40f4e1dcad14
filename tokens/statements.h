// Every SQL statement of tokens/, in one place. Private to tokens/.
//
// Hashes travel as lowercase hex text (decode/encode in SQL): libpqxx 6.4 has no bytea
// parameters without escaping by hand. A token row is found by its hash alone (the primary key).
#pragma once

#include "pg/pg.h"

namespace runledger::tokens::sql {

// What token_from_row() reads.
#define RUNLEDGER_TOKEN_COLUMNS "name, scope, slots, created_at, revoked_at"

// Empty when a token that is not revoked already has the name (api_tokens_one_active_name).
inline constexpr pg::Statement kInsertToken{"tokens_insert", R"sql(
  INSERT INTO api_tokens (token_sha256, name, scope, slots)
  VALUES (decode($1, 'hex'), $2, $3, $4)
  ON CONFLICT (name) WHERE revoked_at IS NULL DO NOTHING
  RETURNING )sql" RUNLEDGER_TOKEN_COLUMNS};

// Revoked tokens too: the list is the record of who had access. Newest first.
inline constexpr pg::Statement kListTokens{
    "tokens_list",
    "SELECT " RUNLEDGER_TOKEN_COLUMNS " FROM api_tokens ORDER BY created_at DESC, token_sha256"};

// The trigger of migration 0017 NOTIFYs runledger_tokens with the hash when this commits.
inline constexpr pg::Statement kRevokeToken{"tokens_revoke", R"sql(
  UPDATE api_tokens SET revoked_at = runledger_now()
  WHERE name = $1 AND revoked_at IS NULL
  RETURNING )sql" RUNLEDGER_TOKEN_COLUMNS};

inline constexpr pg::Statement kLiveToken{
    "tokens_live",
    "SELECT " RUNLEDGER_TOKEN_COLUMNS
    " FROM api_tokens WHERE token_sha256 = decode($1, 'hex') AND revoked_at IS NULL"};

// Whether this session's LISTEN took effect: libpqxx 6.4 swallows a LISTEN that failed with a
// lost connection.
inline constexpr pg::Statement kListening{
    "tokens_listening",
    "SELECT count(*) FROM pg_listening_channels() AS channel WHERE channel = 'runledger_tokens'"};

#undef RUNLEDGER_TOKEN_COLUMNS

}  // namespace runledger::tokens::sql
