// Schema migrations: the numbered files migrations/NNNN_name.sql, compiled into the binary; and
// markers, one-time facts about a database (its table, runledger_markers, is this module's).
//
// Contract:
//  - apply() applies every migration the database lacks, in order, each in its own transaction
//    together with its record (version, name, SHA-256 of the file's bytes) in
//    runledger_migrations. It runs under a session advisory lock, so processes that start at once
//    apply each migration exactly once; the others wait and then find nothing to do.
//  - An applied migration whose file has changed since, or an applied version this build does not
//    know (the database is newer than the code), is a Conflict naming the version: nothing is
//    applied.
//  - The schema they make has no way to move the database clock: runledger_now() is now()
//    (migration 0014). Tests install the movable clock separately
//    (migrations/test_clock/test_clock.h).
//  - A marker records that something happened once in this database (e.g. "demo.ship": the
//    first-start demo was shown). mark_once() returns true for the one call that recorded it,
//    whichever process made it and however many call at once, and false forever after; marked()
//    says whether it is recorded. Names are 1-255 bytes of UTF-8 without control characters
//    (InvalidArgument otherwise). Markers are never removed.
//
// Thread-safety: functions are thread-safe; apply() and applied() open their own connection, the
// marker functions borrow one from the pool.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pg/pg.h"

namespace runledger::migrations {

// The advisory lock (advisory locks are per database) under which apply() runs; the test clock
// (migrations/test_clock/test_clock.h) installs under it too. Any constant unique to runledger.
inline constexpr std::int64_t kLock = 0x72756e6c6467;  // "runldg"

struct Migration {
  int version;
  std::string name;    // e.g. "0001_ledger"
  std::string sql;     // the file's exact bytes
  std::string sha256;  // hex of the file's bytes
};

// The migrations compiled into this binary, in version order.
const std::vector<Migration>& all();

struct Applied {
  int version;
  std::string name;
};

// Applies what is missing; returns what this call applied (empty when up to date).
std::vector<Applied> apply(const std::string& url);

// Versions recorded as applied in the database, in order.
std::vector<Applied> applied(const std::string& url);

// Records marker `name`; true when this call recorded it, false when it was recorded before.
bool mark_once(pg::Pool& pool, std::string_view name);
// Whether marker `name` is recorded.
bool marked(pg::Pool& pool, std::string_view name);

}  // namespace runledger::migrations
