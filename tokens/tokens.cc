#include "tokens/tokens.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <array>
#include <stdexcept>

#include "digest/digest.h"
#include "errors/errors.h"
#include "ids/ids.h"
#include "timestamps/timestamps.h"
#include "tokens/lookup_cache.h"
#include "tokens/statements.h"

namespace runledger::tokens {
namespace {

constexpr std::string_view kPrefix = "rl_";
constexpr std::size_t kRandomBytes = 32;
// base64url of kRandomBytes without padding: ceil(32 * 8 / 6).
constexpr std::size_t kEncodedLength = (kRandomBytes * 8 + 5) / 6;

std::string new_token() {
  std::array<unsigned char, kRandomBytes> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    throw std::runtime_error("RAND_bytes failed");
  }
  std::string token(kPrefix);
  token += digest::base64url(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  OPENSSL_cleanse(bytes.data(), bytes.size());
  return token;
}

bool token_shaped(std::string_view bearer) {
  return bearer.size() == kPrefix.size() + kEncodedLength && bearer.starts_with(kPrefix) &&
         digest::from_base64url(bearer.substr(kPrefix.size())).has_value();
}

// What the table holds and the notifications name.
std::string hash_of(std::string_view token) {
  return digest::hex(digest::sha256(token));
}

[[noreturn]] void refuse_bearer() {
  throw Unauthenticated("unknown or revoked token");
}

TokenInfo token_from_row(const pqxx::row& row) {
  TokenInfo info{.name = row["name"].as<std::string>(),
                 .scope = parse_scope(row["scope"].as<std::string>()),
                 .slots = std::nullopt,
                 .created_at = row["created_at"].as<std::string>(),
                 .revoked_at = std::nullopt};
  if (!row["slots"].is_null()) info.slots = row["slots"].as<std::string>();
  if (!row["revoked_at"].is_null()) info.revoked_at = row["revoked_at"].as<std::string>();
  return info;
}

}  // namespace

std::string_view to_string(Scope scope) {
  switch (scope) {
    case Scope::bot:
      return "bot";
    case Scope::coordinator:
      return "coordinator";
    case Scope::operator_scope:
      return "operator";
  }
  return "unknown";
}

Scope parse_scope(std::string_view name) {
  for (const Scope scope : {Scope::bot, Scope::coordinator, Scope::operator_scope}) {
    if (name == to_string(scope)) return scope;
  }
  throw InvalidArgument("unknown scope '" + std::string(name) + "': bot, coordinator or operator",
                        {{"field", "scope"}});
}

bool covers(Scope held, Scope needed) {
  return held == Scope::operator_scope || held == needed;
}

nlohmann::json to_json(const TokenInfo& info) {
  return {{"name", info.name},
          {"scope", to_string(info.scope)},
          {"slots", info.slots ? nlohmann::json(*info.slots) : nlohmann::json(nullptr)},
          {"created_at", timestamps::rfc3339(info.created_at)},
          {"revoked_at", info.revoked_at ? nlohmann::json(timestamps::rfc3339(*info.revoked_at))
                                         : nlohmann::json(nullptr)}};
}

Tokens::Tokens(pg::Pool& pool, Options options)
    : pool_(pool), cache_(std::make_unique<LookupCache>(pool.url(), options)) {}

Tokens::~Tokens() = default;

Created Tokens::create(Scope scope, std::string_view name, std::optional<std::string> slots) {
  check_key(name, "name");
  if (slots) {
    if (scope != Scope::bot) {
      throw InvalidArgument("only a bot token carries slots", {{"field", "slots"}});
    }
    check_key(*slots, "slots");
  }
  Created created{.token = new_token(), .info = {}};
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kInsertToken, hash_of(created.token), std::string(name),
                             std::string(to_string(scope)), pg::nullable(slots));
  if (rows.empty()) {
    throw Conflict("a token that is not revoked is named '" + std::string(name) + "'",
                   {{"name", name}});
  }
  created.info = token_from_row(rows[0]);
  return created;
}

std::vector<TokenInfo> Tokens::list() {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  std::vector<TokenInfo> out;
  for (const auto& row : pg::exec(tx, sql::kListTokens)) out.push_back(token_from_row(row));
  return out;
}

TokenInfo Tokens::revoke(std::string_view name) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kRevokeToken, std::string(name));
  if (rows.empty()) {
    throw NotFound("no token that is not revoked is named '" + std::string(name) + "'",
                   {{"name", name}});
  }
  return token_from_row(rows[0]);
}

TokenInfo Tokens::authenticate(std::string_view bearer) {
  if (!token_shaped(bearer)) refuse_bearer();
  const std::string hash = hash_of(bearer);
  const auto lookup = cache_->find(hash);
  if (lookup.cached) return *lookup.cached;
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kLiveToken, hash);
  if (rows.empty()) refuse_bearer();
  TokenInfo info = token_from_row(rows[0]);
  cache_->remember(hash, info, lookup.ticket);
  return info;
}

bool Tokens::caching() const {
  return cache_->listening();
}

}  // namespace runledger::tokens
