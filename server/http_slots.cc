// HTTP slots: the newest incarnation of a slot, by first sight, owns it.
#include "errors/errors.h"
#include "server/context.h"
#include "server/statements.h"

namespace runledger::server {
namespace {

[[noreturn]] void refuse_superseded(const std::string& slot, const IncarnationId& incarnation) {
  throw Superseded("incarnation " + incarnation.value() + " of slot " + slot +
                       " was replaced by a newer one; it may not claim or heartbeat again",
                   {{"slot", slot}, {"incarnation", incarnation.value()}});
}

}  // namespace

HttpSlots::Entered HttpSlots::enter(const std::string& slot, const IncarnationId& incarnation) {
  auto conn = pool_.acquire();
  {
    pqxx::nontransaction tx(*conn);
    const auto current = pg::exec(tx, sql::kSlotOfIncarnation, incarnation.value());
    if (!current.empty()) {
      const auto owner = current[0][0].as<std::string>();
      if (owner == slot) return {false};  // the common case: one read
      throw Conflict("incarnation " + incarnation.value() + " serves another slot",
                     {{"incarnation", incarnation.value()}});
    }
    const auto superseded = pg::exec(tx, sql::kSupersededSlot, incarnation.value());
    if (!superseded.empty()) refuse_superseded(superseded[0][0].as<std::string>(), incarnation);
  }
  // A new incarnation: first sight makes it the newest.
  pg::Work tx(*conn);
  const auto locked = pg::exec(tx, sql::kLockSlot, slot);
  bool replaced = false;
  if (locked.empty()) {
    if (pg::exec(tx, sql::kInsertSlot, slot, incarnation.value()).empty()) {
      // Another incarnation's first claim inserted the row meanwhile: ours is newer still.
      const auto now_locked = pg::exec(tx, sql::kLockSlot, slot);
      pg::exec(tx, sql::kReplaceIncarnation, slot, incarnation.value(),
               now_locked[0][0].as<std::string>());
      replaced = true;
    }
  } else if (locked[0][0].as<std::string>() != incarnation.value()) {
    pg::exec(tx, sql::kReplaceIncarnation, slot, incarnation.value(),
             locked[0][0].as<std::string>());
    replaced = true;
  }
  // A concurrent enter() of this very incarnation may have superseded it meanwhile.
  if (!pg::exec(tx, sql::kSupersededSlot, incarnation.value()).empty()) {
    refuse_superseded(slot, incarnation);
  }
  tx.commit();
  return {replaced};
}

std::string HttpSlots::slot_of(const IncarnationId& incarnation) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto current = pg::exec(tx, sql::kSlotOfIncarnation, incarnation.value());
  if (!current.empty()) return current[0][0].as<std::string>();
  const auto superseded = pg::exec(tx, sql::kSupersededSlot, incarnation.value());
  if (!superseded.empty()) refuse_superseded(superseded[0][0].as<std::string>(), incarnation);
  throw NotFound("incarnation " + incarnation.value() + " has not claimed: claim first",
                 {{"incarnation", incarnation.value()}});
}

}  // namespace runledger::server
