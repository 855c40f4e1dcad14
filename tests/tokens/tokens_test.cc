// API tokens against a fresh database: what is stored, what authenticates, and revocation
// reaching another server's cache within a second.
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <set>
#include <thread>

#include "digest/digest.h"
#include "errors/errors.h"
#include "tests/support/test_database.h"
#include "tokens/tokens.h"

using namespace runledger;
using namespace runledger::testing;
using namespace std::chrono_literals;
using tokens::Scope;

namespace {

struct TokensFixture {
  // Test setup reads and changes api_tokens directly.
  pqxx::result sql(const std::string& statement) const {
    pqxx::connection conn(db.url());
    pqxx::nontransaction tx(conn);
    return tx.exec(statement);
  }

  TestDatabase db;
  pg::Pool pool{db.pool_options()};
  tokens::Tokens tokens{pool};
};

// A second server on the same database whose cache would keep an entry for a minute: only a
// notification can evict it in time.
tokens::Options long_lived_cache() {
  tokens::Options options;
  options.cache_ttl = 60s;
  return options;
}

// A database on a closed port: every connection attempt fails at once.
pg::Pool::Options unreachable_database() {
  pg::Pool::Options options;
  options.url = "postgresql://127.0.0.1:1/nothing?connect_timeout=2";
  options.acquire_timeout = 2s;
  return options;
}

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

// Authenticates once (which starts the listener), waits for the listener's LISTEN, and
// authenticates again, which caches the lookup.
void cache_lookup(tokens::Tokens& server, const std::string& token) {
  server.authenticate(token);
  REQUIRE(wait_until([&] { return server.caching(); }, 10s));
  server.authenticate(token);
}

std::string hash_hex(const std::string& token) {
  return digest::hex(digest::sha256(token));
}

bool refused(tokens::Tokens& server, const std::string& token) {
  try {
    server.authenticate(token);
    return false;
  } catch (const Unauthenticated&) {
    return true;
  }
}

// The process id of the session LISTENing for revocations (its last statement checked its
// LISTEN), or 0 when there is none.
int listener_pid(const TokensFixture& f) {
  const auto rows = f.sql(
      "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
      "AND pid <> pg_backend_pid() AND query LIKE '%pg_listening_channels%'");
  return rows.empty() ? 0 : rows[0][0].as<int>();
}

}  // namespace

TEST_CASE("a created token authenticates as its name, scope and slots") {
  TokensFixture f;
  const auto created = f.tokens.create(Scope::bot, "bot-fleet", "bot-*");
  CHECK(created.info.name == "bot-fleet");
  CHECK(created.info.scope == Scope::bot);
  CHECK(created.info.slots == "bot-*");
  CHECK_FALSE(created.info.created_at.empty());
  CHECK_FALSE(created.info.revoked_at);

  const auto info = f.tokens.authenticate(created.token);
  CHECK(info.name == "bot-fleet");
  CHECK(info.scope == Scope::bot);
  CHECK(info.slots == "bot-*");
  CHECK(info.created_at == created.info.created_at);

  const auto coordinator = f.tokens.create(Scope::coordinator, "coordinator-1", std::nullopt);
  CHECK(f.tokens.authenticate(coordinator.token).scope == Scope::coordinator);
  CHECK_FALSE(f.tokens.authenticate(coordinator.token).slots);
}

TEST_CASE("the database keeps only the token's SHA-256, and no column holds its text") {
  TokensFixture f;
  const auto created = f.tokens.create(Scope::operator_scope, "alice", std::nullopt);
  const std::string secret = created.token.substr(3);  // without the "rl_" everyone knows
  const auto rows = f.sql("SELECT t::text, encode(token_sha256, 'hex') FROM api_tokens t");
  REQUIRE(rows.size() == 1);
  const auto row_text = rows[0][0].as<std::string>();
  CHECK(row_text.find(secret) == std::string::npos);
  CHECK(row_text.find(digest::hex(created.token)) == std::string::npos);
  CHECK(rows[0][1].as<std::string>() == hash_hex(created.token));
}

TEST_CASE("a token is rl_ and 43 base64url characters of 32 random bytes, never the same twice") {
  TokensFixture f;
  std::set<std::string> seen;
  for (int i = 0; i < 20; ++i) {
    const auto token = f.tokens.create(Scope::bot, "bot-" + std::to_string(i), std::nullopt).token;
    REQUIRE(token.size() == 3 + 43);
    CHECK(token.starts_with("rl_"));
    const auto bytes = digest::from_base64url(token.substr(3));
    REQUIRE(bytes);
    CHECK(bytes->size() == 32);  // 256 bits
    CHECK(seen.insert(token).second);
  }
}

TEST_CASE("a malformed or unknown token is Unauthenticated, and the refusal never echoes it") {
  TokensFixture f;
  const auto created = f.tokens.create(Scope::bot, "bot-1", std::nullopt);
  std::string unknown = created.token;
  unknown[10] = unknown[10] == 'A' ? 'B' : 'A';
  std::string bad_alphabet = created.token;
  bad_alphabet[10] = '+';
  const std::vector<std::string> bearers = {"",
                                            "rl_",
                                            "xx_" + created.token.substr(3),
                                            created.token.substr(0, 45),
                                            created.token + "A",
                                            bad_alphabet,
                                            created.token.substr(0, 45) + "=",
                                            unknown};
  for (const auto& bearer : bearers) {
    INFO(bearer);
    try {
      f.tokens.authenticate(bearer);
      FAIL("authenticated");
    } catch (const Unauthenticated& e) {
      CHECK(std::string(e.what()) == "unknown or revoked token");
    }
  }

  // Malformed bearers are refused without a database: a server whose database is unreachable
  // still says Unauthenticated for them, and Unavailable only for a token it would look up.
  pg::Pool unreachable(unreachable_database());
  tokens::Tokens offline(unreachable);
  for (const auto& bearer : bearers) {
    if (bearer == unknown) continue;
    INFO(bearer);
    CHECK_THROWS_AS(offline.authenticate(bearer), Unauthenticated);
  }
  CHECK_THROWS_AS(offline.authenticate(unknown), Unavailable);
}

TEST_CASE("a revoked token is refused within a second by another server that had it cached") {
  TokensFixture f;
  tokens::Tokens server(f.pool, long_lived_cache());
  const auto revoked = f.tokens.create(Scope::coordinator, "coordinator-1", std::nullopt);
  const auto kept = f.tokens.create(Scope::bot, "bot-1", std::nullopt);
  cache_lookup(server, revoked.token);
  cache_lookup(server, kept.token);
  // The server really serves from its cache: a row deleted behind its back (no notification) is
  // still found.
  f.sql("DELETE FROM api_tokens WHERE name = 'bot-1'");
  CHECK(server.authenticate(kept.token).name == "bot-1");

  f.tokens.revoke("coordinator-1");
  const auto revoked_at = std::chrono::steady_clock::now();
  CHECK(wait_until([&] { return refused(server, revoked.token); }, 1s));
  INFO("refused after " << std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - revoked_at)
                               .count()
                        << " ms");
  CHECK(refused(f.tokens, revoked.token));
  // The notification evicted the revoked token's hash alone.
  CHECK(server.authenticate(kept.token).name == "bot-1");
  CHECK(server.caching());
}

TEST_CASE(
    "a lost listener connection empties the cache, and lookups read the database until it "
    "is back") {
  TokensFixture f;
  tokens::Tokens server(f.pool, long_lived_cache());
  const auto created = f.tokens.create(Scope::bot, "bot-1", std::nullopt);
  cache_lookup(server, created.token);
  const int first = listener_pid(f);
  REQUIRE(first != 0);

  f.sql("SELECT pg_terminate_backend(" + std::to_string(first) + ")");
  // Back on a new session: the loss was noticed on the way.
  REQUIRE(wait_until(
      [&] {
        const int now = listener_pid(f);
        return now != 0 && now != first && server.caching();
      },
      10s));
  // What was cached before the loss is gone: a row deleted behind the server's back is not found.
  f.sql("DELETE FROM api_tokens WHERE name = 'bot-1'");
  CHECK(refused(server, created.token));
}

TEST_CASE("revoking a name without a live token is NotFound, and a revoked name can be reused") {
  TokensFixture f;
  CHECK_THROWS_AS(f.tokens.revoke("nobody"), NotFound);

  const auto first = f.tokens.create(Scope::bot, "bot-1", std::nullopt);
  CHECK_THROWS_AS(f.tokens.create(Scope::coordinator, "bot-1", std::nullopt), Conflict);
  const auto revoked = f.tokens.revoke("bot-1");
  CHECK(revoked.name == "bot-1");
  CHECK(revoked.revoked_at);
  CHECK_THROWS_AS(f.tokens.revoke("bot-1"), NotFound);

  const auto second = f.tokens.create(Scope::coordinator, "bot-1", std::nullopt);
  CHECK(f.tokens.authenticate(second.token).scope == Scope::coordinator);
  CHECK(refused(f.tokens, first.token));
}

TEST_CASE("list shows every token newest first, revoked ones with their time, never a secret") {
  TokensFixture f;
  std::vector<std::string> secrets;
  for (const char* name : {"a", "b", "c"}) {
    secrets.push_back(f.tokens.create(Scope::bot, name, std::nullopt).token);
    f.db.advance_clock(1ms);
  }
  f.tokens.revoke("b");
  const auto listed = f.tokens.list();
  REQUIRE(listed.size() == 3);
  CHECK(listed[0].name == "c");
  CHECK(listed[1].name == "b");
  CHECK(listed[2].name == "a");
  CHECK(listed[1].revoked_at);
  CHECK_FALSE(listed[0].revoked_at);
  for (const auto& info : listed) {
    const std::string shown = tokens::to_json(info).dump();
    for (const auto& secret : secrets) {
      CHECK(shown.find(secret.substr(3)) == std::string::npos);
      CHECK(shown.find(hash_hex(secret)) == std::string::npos);
    }
  }
}

TEST_CASE("slots are only for bot tokens, and names and slots are checked as keys") {
  TokensFixture f;
  CHECK_THROWS_AS(f.tokens.create(Scope::coordinator, "c", "bot-*"), InvalidArgument);
  CHECK_THROWS_AS(f.tokens.create(Scope::operator_scope, "o", "*"), InvalidArgument);
  CHECK_THROWS_AS(f.tokens.create(Scope::bot, "b", ""), InvalidArgument);
  CHECK_THROWS_AS(f.tokens.create(Scope::bot, "b", "bot-\x01"), InvalidArgument);
  CHECK_THROWS_AS(f.tokens.create(Scope::bot, "", std::nullopt), InvalidArgument);
  CHECK_THROWS_AS(f.tokens.create(Scope::bot, "line\nbreak", std::nullopt), InvalidArgument);
  CHECK_THROWS_AS(f.tokens.create(Scope::bot, std::string(256, 'n'), std::nullopt),
                  InvalidArgument);
  CHECK(f.tokens.list().empty());

  CHECK(f.tokens.create(Scope::bot, "b", "bot-?").info.slots == "bot-?");
  CHECK_FALSE(f.tokens.create(Scope::bot, "any", std::nullopt).info.slots);
}

TEST_CASE("covers: an operator token passes every scope, the others only their own") {
  const std::vector<Scope> all = {Scope::bot, Scope::coordinator, Scope::operator_scope};
  for (const Scope held : all) {
    for (const Scope needed : all) {
      INFO(tokens::to_string(held) << " for " << tokens::to_string(needed));
      CHECK(tokens::covers(held, needed) == (held == Scope::operator_scope || held == needed));
    }
  }
  CHECK_FALSE(tokens::covers(Scope::bot, Scope::coordinator));
  CHECK_FALSE(tokens::covers(Scope::coordinator, Scope::operator_scope));
  CHECK(tokens::covers(Scope::operator_scope, Scope::bot));
  for (const Scope scope : all) CHECK(tokens::parse_scope(tokens::to_string(scope)) == scope);
  CHECK(tokens::to_string(Scope::operator_scope) == "operator");
  CHECK_THROWS_AS(tokens::parse_scope("admin"), InvalidArgument);
}

TEST_CASE("destroying Tokens stops its listener promptly, connected or reconnecting") {
  TokensFixture f;
  const auto created = f.tokens.create(Scope::bot, "bot-1", std::nullopt);
  auto connected = std::make_unique<tokens::Tokens>(f.pool);
  cache_lookup(*connected, created.token);
  auto started = std::chrono::steady_clock::now();
  connected.reset();
  CHECK(std::chrono::steady_clock::now() - started < 1s);

  pg::Pool unreachable(unreachable_database());
  auto reconnecting = std::make_unique<tokens::Tokens>(unreachable);
  CHECK_THROWS_AS(reconnecting->authenticate(created.token), Unavailable);
  std::this_thread::sleep_for(300ms);  // into its backoff
  CHECK_FALSE(reconnecting->caching());
  started = std::chrono::steady_clock::now();
  reconnecting.reset();
  CHECK(std::chrono::steady_clock::now() - started < 1s);
}
