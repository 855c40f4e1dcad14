// Every SQL statement of the migrations module, in one place. Private to migrations/.
#pragma once

#include "pg/pg.h"

namespace runledger::migrations::sql {

// The record of applied migrations is the runner's own bookkeeping, so it creates it itself;
// everything else lives in the numbered files.
inline constexpr pg::Statement kCreateRecord{"migrations_create_record", R"sql(
  CREATE TABLE IF NOT EXISTS runledger_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())
)sql"};
inline constexpr pg::Statement kTakeLock{"migrations_lock", "SELECT pg_advisory_lock($1)"};
inline constexpr pg::Statement kApplied{
    "migrations_applied",
    "SELECT version, name, sha256 FROM runledger_migrations ORDER BY version"};
inline constexpr pg::Statement kRecord{
    "migrations_record",
    "INSERT INTO runledger_migrations (version, name, sha256) VALUES ($1, $2, $3)"};
inline constexpr pg::Statement kRecordExists{
    "migrations_record_exists", "SELECT to_regclass('runledger_migrations') IS NOT NULL"};

// Markers (runledger_markers, migration 0008): a row is the fact; the primary key makes the
// first insert the only one that returns a row.
inline constexpr pg::Statement kMarkOnce{
    "migrations_mark_once",
    "INSERT INTO runledger_markers (name) VALUES ($1) ON CONFLICT (name) DO NOTHING "
    "RETURNING name"};
inline constexpr pg::Statement kMarked{"migrations_marked",
                                       "SELECT 1 FROM runledger_markers WHERE name = $1"};

}  // namespace runledger::migrations::sql
