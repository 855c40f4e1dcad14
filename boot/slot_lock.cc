#include "boot/slot_lock.h"

#include <thread>

#include "errors/errors.h"
#include "pg/pg.h"

namespace runledger::boot {
namespace {

constexpr pg::Statement kKey{"boot_slot_key",
                             "SELECT hashtextextended('runledger.slot:' || $1, 0)"};
constexpr pg::Statement kTryLock{"boot_slot_try_lock", "SELECT pg_try_advisory_lock($1)"};
constexpr pg::Statement kBackendPid{"boot_backend_pid", "SELECT pg_backend_pid()"};
// Held by this backend, as the server sees it.
constexpr pg::Statement kHeld{"boot_slot_held", R"sql(
  SELECT count(*) FROM pg_locks
  WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
    AND objsubid = 1 AND classid::bigint = (($1::bigint >> 32) & 4294967295)
    AND objid::bigint = ($1::bigint & 4294967295)
)sql"};

}  // namespace

namespace {
std::unique_ptr<pqxx::connection> connect(const std::string& url) {
  try {
    return std::make_unique<pqxx::connection>(url);
  } catch (const std::exception&) {
    pg::rethrow_classified(pg::Phase::connect);
  }
}
}  // namespace

SlotLock::SlotLock(const std::string& url, const SlotName& slot, std::chrono::milliseconds wait)
    : conn_(connect(url)) {
  pqxx::nontransaction tx(*conn_);
  key_ = pg::exec(tx, kKey, slot.value())[0][0].as<std::int64_t>();
  backend_pid_ = pg::exec(tx, kBackendPid)[0][0].as<int>();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (!pg::exec(tx, kTryLock, key_)[0][0].as<bool>()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Conflict("slot " + slot.value() + " is held by another live process",
                     {{"slot", slot.value()}});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

bool SlotLock::still_held() {
  try {
    pqxx::nontransaction tx(*conn_);
    if (pg::exec(tx, kBackendPid)[0][0].as<int>() != backend_pid_) return false;
    return pg::exec(tx, kHeld, key_)[0][0].as<int>() == 1;
  } catch (const Unavailable&) {
    // The session is gone, and the lock with it (or the server could not tell us): lost.
    return false;
  }
}

}  // namespace runledger::boot
