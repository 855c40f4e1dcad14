// The slot: a session advisory lock on a dedicated connection. Private to boot/.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <pqxx/pqxx>

#include "ids/ids.h"

namespace runledger::boot {

class SlotLock {
 public:
  // Retries for `wait`, then throws Conflict naming the slot.
  SlotLock(const std::string& url, const SlotName& slot, std::chrono::milliseconds wait);
  // False once the lock's session is gone: the connection broke, or libpqxx reconnected to a new
  // backend (which does not hold the lock).
  bool still_held();

 private:
  std::unique_ptr<pqxx::connection> conn_;
  std::int64_t key_ = 0;
  int backend_pid_ = 0;
};

}  // namespace runledger::boot
