// API tokens, the credentials of the HTTP API (`Authorization: Bearer <token>`): created,
// listed, revoked, and authenticated. The owner of table api_tokens (migration 0017).
//
// Contract:
//  - A token is "rl_" and 43 characters of base64url (no padding): 32 bytes of OpenSSL's CSPRNG.
//    create() returns it once; the database keeps only its SHA-256, with the token's name, scope,
//    slots and times. Nothing here logs, lists or throws a token or its hash.
//  - A name is a key (ids/ids.h check_key); at most one token that is not revoked has it
//    (Conflict), and a revoked token's name may be given again. Only a bot token carries slots: a
//    glob of the slots it may serve (settlement::glob_match's `*` and `?`; the server matches it),
//    checked as a key here.
//  - authenticate() returns the live token `bearer` is, else throws Unauthenticated ("unknown or
//    revoked token", never echoing it); a bearer that is not of the token's shape is refused
//    without a database read.
//  - Revocation reaches every Tokens within a second. revoke() commits revoked_at, whose trigger
//    NOTIFYs channel runledger_tokens with the hash in hex. Each Tokens caches live lookups
//    (hash -> TokenInfo, at most Options::cache_entries, each for Options::cache_ttl), and its
//    listener, on a connection of its own (not the pool's), evicts the hash a notification names.
//    The cache is used only while the listener's LISTEN is in effect: before it is, and from the
//    moment its connection is lost until it is back, every authenticate() reads the database, and
//    losing it empties the cache, so a notification missed meanwhile cannot keep a revoked token
//    alive. A lookup that may have raced a notification is not cached. cache_ttl bounds only what
//    no notification can reach: a listener whose connection died without its socket saying so.
//  - Unknown and revoked tokens are never cached: each costs one primary-key read.
//  - The listener starts with the first authenticate() (a Tokens that only administers tokens, as
//    the CLI's, opens no extra connection) and reconnects with a jittered backoff until stopped;
//    ~Tokens stops it within about 200 ms, or once a connection attempt under way ends.
//  - Database failures are Unavailable (pg/), never Unauthenticated.
//
// Thread-safety: Tokens is thread-safe (each call borrows its own pooled connection). Values are
// immutable.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pg/pg.h"

namespace runledger::tokens {

// What a token may do. An operator token passes every scope (covers()).
enum class Scope { bot, coordinator, operator_scope };
// "bot", "coordinator", "operator": the names the table and the command line use.
std::string_view to_string(Scope scope);
// InvalidArgument for an unknown name.
Scope parse_scope(std::string_view name);
// Whether a token of scope `held` may do what needs scope `needed`.
bool covers(Scope held, Scope needed);

// A token as listed: never its text or its hash.
struct TokenInfo {
  std::string name;
  Scope scope;
  std::optional<std::string> slots;  // a bot token's slot glob; none: any slot
  std::string created_at;            // database time, UTC
  std::optional<std::string> revoked_at;
};
nlohmann::json to_json(const TokenInfo& info);

struct Created {
  std::string token;  // the secret, shown once
  TokenInfo info;
};

struct Options {
  // How long a live lookup is served from the cache. Revocation does not wait for it (the
  // notification evicts at once); it bounds a listener that is cut off without knowing it.
  std::chrono::milliseconds cache_ttl{10'000};
  // Lookups cached at most; the oldest leave first.
  std::size_t cache_entries = 10'000;
  // The listener's waits between connection attempts: doubling from the first, at most the most.
  std::chrono::milliseconds reconnect_first{100};
  std::chrono::milliseconds reconnect_most{5'000};
};

class LookupCache;

class Tokens {
 public:
  explicit Tokens(pg::Pool& pool, Options options = {});
  ~Tokens();
  Tokens(const Tokens&) = delete;
  Tokens& operator=(const Tokens&) = delete;

  // A new token. InvalidArgument for a bad name or glob, or slots for a scope other than bot;
  // Conflict when a token that is not revoked has the name.
  Created create(Scope scope, std::string_view name, std::optional<std::string> slots);
  // Every token, revoked ones too, newest first.
  std::vector<TokenInfo> list();
  // Revokes the live token named `name` and returns it; NotFound when no live token has it.
  TokenInfo revoke(std::string_view name);
  // The live token `bearer` is; Unauthenticated otherwise.
  TokenInfo authenticate(std::string_view bearer);

  // Whether authenticate() uses the cache now: the listener's LISTEN is in effect. For health
  // reports and tests.
  bool caching() const;

 private:
  pg::Pool& pool_;
  std::unique_ptr<LookupCache> cache_;
};

}  // namespace runledger::tokens
