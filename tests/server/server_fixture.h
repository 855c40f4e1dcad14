// A server on a fresh database, listening on a free loopback port, with a token per scope.
#pragma once

#include <memory>
#include <string>

#include "ids/ids.h"
#include "server/server.h"
#include "tests/support/http_client.h"
#include "tests/support/test_database.h"
#include "tokens/tokens.h"
#include "wire/wire.h"

namespace runledger::testing {

// A run claimed over HTTP: its id and the generation its holder writes under.
struct Held {
  std::string run;
  std::int64_t generation;
  std::string path() const { return "/v1/runs/" + run; }
};

struct ServerFixture {
  // `acquire_timeout`: how long a request waits for one of the server's 12 connections.
  explicit ServerFixture(server::Options o = fast_options(),
                         std::chrono::milliseconds acquire_timeout = std::chrono::seconds(10))
      : pool(server_pool(db, acquire_timeout)), admin_pool(db.pool_options(2)), admin(admin_pool) {
    options = std::move(o);
    options.address = "127.0.0.1";
    options.port = 0;
    bot_token = admin.create(tokens::Scope::bot, "bot", std::nullopt).token;
    http = std::make_unique<server::Server>(pool, db.url(), options);
    http->start();
  }

  static server::Options fast_options() {
    server::Options o;
    o.io_threads = 2;
    o.database_threads = 8;
    o.ledger.lease_ttl = std::chrono::milliseconds(30'000);
    o.claim_poll = std::chrono::milliseconds(200);
    o.grace = std::chrono::milliseconds(2'000);
    o.effect_classes = settlement::EffectClasses::parse("pure: read_*\nidempotent: write_*\n");
    return o;
  }

  static pg::Pool::Options server_pool(const TestDatabase& db, std::chrono::milliseconds timeout) {
    auto o = db.pool_options(12);
    o.acquire_timeout = timeout;
    return o;
  }

  HttpClient client() { return HttpClient(http->port(), bot_token); }
  std::string token(tokens::Scope scope, const std::string& name,
                    std::optional<std::string> slots = std::nullopt) {
    return admin.create(scope, name, std::move(slots)).token;
  }

  // A dispatch over HTTP; returns the run id.
  std::string dispatch(HttpClient& c, const std::string& key, nlohmann::json extra = {}) {
    nlohmann::json body{
        {"dispatch_key", key}, {"thread_key", "thread-" + key}, {"requester", "tests"}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    const auto answer = c.post("/v1/runs", body);
    if (answer.status != 201 && answer.status != 200) {
      throw std::runtime_error("dispatch: " + std::to_string(answer.status) + " " + answer.body);
    }
    return answer.json()["run_id"];
  }

  // A claim of one run by a fresh incarnation of `slot`; returns {run_id, generation}.
  std::pair<std::string, std::int64_t> claim_one(HttpClient& c, const std::string& slot,
                                                 const std::string& incarnation = random_uuid()) {
    const auto answer =
        c.post("/v1/runs/claim", {{"slot", slot}, {"incarnation", incarnation}, {"max", 1}});
    if (answer.status != 200 || answer.json()["runs"].empty()) {
      throw std::runtime_error("claim: " + std::to_string(answer.status) + " " + answer.body);
    }
    const auto run = answer.json()["runs"][0];
    return {run["run_id"], run["generation"]};
  }

  // A fresh dispatch, claimed by slot py-1.
  Held dispatch_and_claim(HttpClient& c, nlohmann::json extra = {}) {
    dispatch(c, "k-" + random_uuid(), std::move(extra));
    const auto [run, generation] = claim_one(c, "py-1");
    return {run, generation};
  }

  TestDatabase db;
  pg::Pool pool;
  pg::Pool admin_pool;
  tokens::Tokens admin;
  server::Options options;
  std::string bot_token;
  std::unique_ptr<server::Server> http;
};

inline std::string base64(std::string_view bytes) {
  return wire::base64_encode(bytes);
}

}  // namespace runledger::testing
