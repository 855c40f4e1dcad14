// Who may call what: one 401/403 envelope for every way a credential fails, checked before the
// resource is looked up.
#include <catch2/catch.hpp>

#include "tests/server/server_fixture.h"

using namespace runledger;
using runledger::testing::HttpClient;
using runledger::testing::ServerFixture;

namespace {

void check_envelope(const testing::HttpAnswer& answer, unsigned status, const std::string& code) {
  CAPTURE(answer.body);
  CHECK(answer.status == status);
  const auto json = answer.json();
  CHECK(json["code"] == code);
  CHECK(json["message"].is_string());
  CHECK(json["details"].is_object());
  CHECK(json["retryable"] == false);
  CHECK(json["request_id"] == answer.headers.at("X-Request-Id"));
}

}  // namespace

TEST_CASE("every way a token fails is one 401 envelope that never echoes the token") {
  ServerFixture f;
  const std::string unknown = "rl_" + std::string(43, 'A');
  const std::string revoked = f.token(tokens::Scope::bot, "to-revoke");
  f.admin.revoke("to-revoke");
  // An unknown run id: the credential is refused before the run is looked up.
  const std::string target = "/v1/runs/" + random_uuid();
  for (const auto& [what, header] :
       std::vector<std::pair<std::string, std::string>>{{"none", ""},
                                                        {"not bearer", "Basic dXNlcjpwYXNz"},
                                                        {"malformed", "Bearer not-a-token"},
                                                        {"unknown", "Bearer " + unknown},
                                                        {"revoked", "Bearer " + revoked}}) {
    CAPTURE(what);
    HttpClient c(f.http->port());
    std::vector<std::pair<std::string, std::string>> headers;
    if (!header.empty()) headers.emplace_back("Authorization", header);
    const auto answer = c.request("GET", target, "", "", headers);
    check_envelope(answer, 401, "unauthenticated");
    if (header.size() > 7) CHECK(answer.body.find(header.substr(7)) == std::string::npos);
  }
}

TEST_CASE("a token of another scope is 403; an operator token passes every scope") {
  ServerFixture f;
  HttpClient coordinator(f.http->port(), f.token(tokens::Scope::coordinator, "coord"));
  check_envelope(coordinator.get("/v1/runs/" + random_uuid()), 403, "forbidden");
  HttpClient operator_client(f.http->port(), f.token(tokens::Scope::operator_scope, "op"));
  CHECK(operator_client.get("/v1/runs/" + random_uuid()).status == 404);
}

TEST_CASE("a bot token with a slot glob may claim and heartbeat only for slots it names") {
  ServerFixture f;
  HttpClient c(f.http->port(), f.token(tokens::Scope::bot, "py-bots", "py-*"));
  const std::string incarnation = random_uuid();
  check_envelope(c.post("/v1/runs/claim", {{"slot", "go-1"}, {"incarnation", incarnation}}), 403,
                 "forbidden");
  CHECK(c.post("/v1/runs/claim", {{"slot", "py-1"}, {"incarnation", incarnation}}).status == 200);
}
