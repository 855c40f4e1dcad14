// What every route works with: the libraries, the tokens, the HTTP slots and the claim waiters
// of one server. Private to server/.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "ledger/ledger.h"
#include "pg/pg.h"
#include "server/server.h"
#include "settlement/settlement.h"
#include "tokens/tokens.h"
#include "transcript/transcript.h"

namespace runledger::server {

// The incarnations of HTTP slots (tables http_slots, http_superseded_incarnations).
class HttpSlots {
 public:
  explicit HttpSlots(pg::Pool& pool) : pool_(pool) {}
  struct Entered {
    bool superseded_another;  // this incarnation replaced the slot's previous one just now
  };
  // Makes `incarnation` the slot's current one if it is new (newest by first sight); Superseded
  // when it was replaced before; Conflict when it is another slot's.
  Entered enter(const std::string& slot, const IncarnationId& incarnation);
  // The slot `incarnation` is current for; Superseded when it was replaced, NotFound when it
  // never claimed.
  std::string slot_of(const IncarnationId& incarnation);

 private:
  pg::Pool& pool_;
};

// Long-polling claims wait here. One LISTEN per server on channel runledger_runs (a new or
// handed-back run) wakes ONE waiter per notification, the oldest: one dispatch is one claim, not
// a herd of them. A supersession wakes every waiter of the slot, which then finds itself refused.
class ClaimWaiters {
 public:
  explicit ClaimWaiters(std::string database_url);
  ~ClaimWaiters();  // stops the listener

  // Waits until woken or `until`. Returns false when the server is shutting down.
  bool wait(const std::string& slot, std::chrono::steady_clock::time_point until);
  void wake_slot(const std::string& slot);
  // Wakes every waiter for good: they answer what they have.
  void shut_down();
  bool shutting_down() const { return stopping_; }
  // Notifications received (for the tests of one dispatch waking one claim).
  std::uint64_t wakeups() const { return wakeups_; }

 private:
  struct Waiter {
    std::string slot;
    bool woken = false;
    std::condition_variable cv;
  };
  void listen_loop();
  void wake_one();

  std::string database_url_;
  std::mutex mu_;
  std::list<Waiter*> waiters_;  // oldest first
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> wakeups_{0};
  std::thread listener_;
};

struct Context {
  Context(pg::Pool& pool, const std::string& database_url, const Options& options);

  const Options& options;
  pg::Pool& pool;
  ledger::Ledger ledger;
  transcript::Store store;
  settlement::Settler settler;
  tokens::Tokens tokens;
  HttpSlots slots;
  ClaimWaiters waiters;
};

// The run as the API answers it: ledger::to_json() with the transcript head and the step count.
nlohmann::json run_json(Context& context, const ledger::Run& run);

}  // namespace runledger::server
