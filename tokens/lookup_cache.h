// The cache of live token lookups, and the listener that keeps it honest (tokens.h's contract).
// Private to tokens/.
//
// A lookup that missed reads the database and then offers its result with remember(), along with
// the ticket find() gave it. The result is cached only if the listener was LISTENing when the
// ticket was taken and nothing happened since that could make it stale: no notification (of any
// hash) and no loss or return of the listener's connection, all of which bump the epoch. So a
// read that began before a revocation committed, and finished after its notification was
// handled, is not cached; one whose notification comes later is evicted by it.
//
// Thread-safety: thread-safe. The listener thread is started by the first find() and stopped by
// the destructor.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <unordered_map>

#include "tokens/tokens.h"

namespace runledger::tokens {

class LookupCache {
 public:
  // What find() saw: whether the cache could be used, and the epoch then.
  struct Ticket {
    bool usable = false;
    std::uint64_t epoch = 0;
  };
  struct Lookup {
    std::optional<TokenInfo> cached;
    Ticket ticket;
  };

  // `database_url`: the listener's own connection.
  LookupCache(std::string database_url, Options options);
  ~LookupCache();
  LookupCache(const LookupCache&) = delete;
  LookupCache& operator=(const LookupCache&) = delete;

  // The cached lookup of `hash` (hex SHA-256), if the cache may be used and holds a fresh one.
  Lookup find(const std::string& hash);
  // Caches `info` as the live token of `hash`, unless `ticket` no longer allows it.
  void remember(const std::string& hash, const TokenInfo& info, const Ticket& ticket);
  // Whether the listener's LISTEN is in effect (and so the cache is used).
  bool listening() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    TokenInfo info;
    Clock::time_point expires;
  };
  struct Inserted {
    std::string hash;
    Clock::time_point expires;
  };

  void listen(std::stop_token stop);
  void listen_until_lost(std::stop_token stop, int& failures);
  // Either way, the cache starts again empty: what it held was not watched in between.
  void set_listening(bool listening);
  void evict(const std::string& hash);

  const std::string database_url_;
  const Options options_;
  mutable std::mutex mu_;
  bool listening_ = false;
  std::uint64_t epoch_ = 0;
  std::unordered_map<std::string, Entry> entries_;
  std::deque<Inserted> insertions_;  // oldest first (every entry lives cache_ttl)
  std::once_flag started_;
  std::jthread listener_;  // last: stopped and joined before the rest is destroyed
};

}  // namespace runledger::tokens
