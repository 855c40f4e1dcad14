// Every SQL statement of the server, in one place: the HTTP slots' incarnations (migration 0017).
// Private to server/.
#pragma once

#include "pg/pg.h"

namespace runledger::server::sql {

inline constexpr pg::Statement kSlotOfIncarnation{
    "server_slot_of_incarnation", "SELECT slot FROM http_slots WHERE incarnation = $1::uuid"};

inline constexpr pg::Statement kSupersededSlot{
    "server_superseded_slot",
    "SELECT slot FROM http_superseded_incarnations WHERE incarnation = $1::uuid"};

// Serializes the incarnations of one slot: whoever holds the row decides which is newest.
inline constexpr pg::Statement kLockSlot{
    "server_lock_slot", "SELECT incarnation FROM http_slots WHERE slot = $1 FOR UPDATE"};

inline constexpr pg::Statement kInsertSlot{"server_insert_slot", R"sql(
  INSERT INTO http_slots (slot, incarnation) VALUES ($1, $2::uuid)
  ON CONFLICT (slot) DO NOTHING RETURNING slot
)sql"};

// $1 slot, $2 the new incarnation, $3 the one it replaces (locked by kLockSlot).
inline constexpr pg::Statement kReplaceIncarnation{"server_replace_incarnation", R"sql(
  WITH old AS (
    INSERT INTO http_superseded_incarnations (incarnation, slot) VALUES ($3::uuid, $1)
    ON CONFLICT (incarnation) DO NOTHING)
  UPDATE http_slots SET incarnation = $2::uuid, since = runledger_now() WHERE slot = $1
)sql"};

}  // namespace runledger::server::sql
