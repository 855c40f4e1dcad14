// What every route works with: the libraries, the tokens, the HTTP slots, the claim waiters and
// the run watch of one server. Private to server/.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <map>
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

// Streams and waits on runs watch here: ONE thread per server, while anyone watches, reads the
// status and the transcript head of every watched run every Options::tail_poll (two statements
// on primary keys however many watch), and wakes those whose run moved past what they saw or
// ended. Nothing is added to the append path (no NOTIFY per append); the price is up to one
// interval of delay.
class RunWatch {
 public:
  RunWatch(ledger::Ledger& ledger, transcript::Store& store, std::chrono::milliseconds interval);
  ~RunWatch();  // stops the thread; wakes whoever still watches

  using Id = std::uint64_t;
  // Calls `wake` once, on the watcher's thread (never inside watch()), when the run's head seq
  // passes `seen_seq`, the run is terminal or gone, or the server shuts down.
  Id watch(const RunId& run, std::int64_t seen_seq, std::function<void()> wake);
  // After cancel() returns, the watch's `wake` is not running and will not run.
  void cancel(Id id);
  // watch() as a blocking call: returns at the wake or at `until`; false when shutting down.
  bool wait(const RunId& run, std::int64_t seen_seq, std::chrono::steady_clock::time_point until);
  void shut_down();
  bool shutting_down() const { return stopping_; }

 private:
  struct Watcher {
    RunId run;
    std::int64_t seen_seq;
    std::function<void()> wake;
  };
  void loop();
  // Runs watch `id`'s wake without the lock, and forgets the watch.
  void wake_locked(std::unique_lock<std::mutex>& lock, Id id);

  ledger::Ledger& ledger_;
  transcript::Store& store_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Id, Watcher> watchers_;
  Id next_id_ = 1;
  Id waking_ = 0;  // the watch whose wake runs now (cancel() waits for it)
  std::condition_variable woke_;
  std::atomic<bool> stopping_{false};
  bool exiting_ = false;  // the destructor: the thread returns
  std::thread thread_;
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
  RunWatch watch;
};

// The run as the API answers it: ledger::to_json() with the transcript head and the step count.
nlohmann::json run_json(Context& context, const ledger::Run& run);

}  // namespace runledger::server
