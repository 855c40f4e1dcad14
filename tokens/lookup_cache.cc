#include "tokens/lookup_cache.h"

#include <spdlog/spdlog.h>

#include <functional>
#include <memory>

#include "errors/errors.h"
#include "tokens/statements.h"

namespace runledger::tokens {
namespace {

constexpr const char* kChannel = "runledger_tokens";
// How long the listener waits on its socket before it looks whether it is asked to stop.
constexpr long kWaitMicros = 200'000;

struct Evictor : pqxx::notification_receiver {
  Evictor(pqxx::connection& conn, std::function<void(const std::string&)> evict)
      : notification_receiver(conn, kChannel), evict(std::move(evict)) {}
  void operator()(const std::string& payload, int) override { evict(payload); }
  std::function<void(const std::string&)> evict;
};

// The listener's connection and its receiver, ended in that order: a receiver destroyed while
// its connection is up UNLISTENs, which on a lost connection would make libpqxx reconnect
// (blocking the stop) only to UNLISTEN.
struct ListenerSession {
  std::unique_ptr<pqxx::connection> conn;
  std::unique_ptr<Evictor> evictor;
  ~ListenerSession() {
    if (conn) conn->disconnect();
    evictor.reset();
  }
};

}  // namespace

LookupCache::LookupCache(std::string database_url, Options options)
    : database_url_(std::move(database_url)), options_(options) {}

LookupCache::~LookupCache() {
  listener_.request_stop();
  if (listener_.joinable()) listener_.join();
}

LookupCache::Lookup LookupCache::find(const std::string& hash) {
  std::call_once(started_,
                 [&] { listener_ = std::jthread([this](std::stop_token stop) { listen(stop); }); });
  std::lock_guard lock(mu_);
  Lookup lookup;
  lookup.ticket.usable = listening_;
  lookup.ticket.epoch = epoch_;
  if (!listening_) return lookup;
  const auto entry = entries_.find(hash);
  if (entry == entries_.end()) return lookup;
  if (entry->second.expires <= Clock::now()) {
    entries_.erase(entry);
  } else {
    lookup.cached = entry->second.info;
  }
  return lookup;
}

void LookupCache::remember(const std::string& hash, const TokenInfo& info, const Ticket& ticket) {
  std::lock_guard lock(mu_);
  if (!ticket.usable || !listening_ || ticket.epoch != epoch_ || options_.cache_entries == 0) {
    return;
  }
  const auto now = Clock::now();
  const auto expires = now + options_.cache_ttl;
  entries_.insert_or_assign(hash, Entry{info, expires});
  insertions_.push_back({hash, expires});
  // The oldest leave first: the expired, then as many as it takes to fit. An insertion that a
  // later one of the same hash, or an eviction, superseded removes nothing.
  while (!insertions_.empty() &&
         (insertions_.front().expires <= now || entries_.size() > options_.cache_entries)) {
    const auto entry = entries_.find(insertions_.front().hash);
    if (entry != entries_.end() && entry->second.expires == insertions_.front().expires) {
      entries_.erase(entry);
    }
    insertions_.pop_front();
  }
}

bool LookupCache::listening() const {
  std::lock_guard lock(mu_);
  return listening_;
}

void LookupCache::set_listening(bool listening) {
  std::lock_guard lock(mu_);
  listening_ = listening;
  ++epoch_;
  entries_.clear();
  insertions_.clear();
}

void LookupCache::evict(const std::string& hash) {
  std::lock_guard lock(mu_);
  ++epoch_;
  entries_.erase(hash);
}

void LookupCache::listen(std::stop_token stop) {
  // Tries until stopped: while it is down, lookups only read the database.
  const pg::Backoff backoff{options_.reconnect_first, options_.reconnect_most, 0};
  int failures = 0;
  while (!stop.stop_requested()) {
    try {
      listen_until_lost(stop, failures);
    } catch (const Unavailable& e) {
      spdlog::warn("tokens: revocation listener: {}; lookups read the database until it is back",
                   e.what());
    } catch (const std::exception& e) {
      spdlog::error("tokens: revocation listener: {}; lookups read the database until it is back",
                    e.what());
    }
    set_listening(false);
    if (stop.stop_requested()) break;
    pg::sleep_for_backoff(backoff.delay(++failures), [&] { return !stop.stop_requested(); });
  }
}

void LookupCache::listen_until_lost(std::stop_token stop, int& failures) {
  ListenerSession session;
  try {
    session.conn = std::make_unique<pqxx::connection>(database_url_);
  } catch (const std::exception&) {
    pg::rethrow_classified(pg::Phase::connect);
  }
  try {
    session.evictor =
        std::make_unique<Evictor>(*session.conn, [this](const std::string& hash) { evict(hash); });
    // Notifications are delivered only outside a transaction: this one ends before the wait.
    pqxx::nontransaction tx(*session.conn);
    if (pg::exec(tx, sql::kListening)[0][0].as<int>() != 1) {
      throw pqxx::broken_connection("LISTEN runledger_tokens did not take effect");
    }
  } catch (const std::exception&) {
    pg::rethrow_classified(pg::Phase::statement);
  }
  set_listening(true);
  if (failures > 0) spdlog::info("tokens: revocation listener is back; lookups are cached again");
  failures = 0;
  while (!stop.stop_requested()) {
    try {
      // Checked before each wait: await_notification() would reconnect a lost connection
      // silently, and whatever was notified meanwhile would be missed unnoticed.
      if (!session.conn->is_open()) {
        throw pqxx::broken_connection("the revocation listener's connection was lost");
      }
      session.conn->await_notification(0, kWaitMicros);
    } catch (const std::exception&) {
      pg::rethrow_classified(pg::Phase::statement);
    }
  }
}

}  // namespace runledger::tokens
