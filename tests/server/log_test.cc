// The request log: a line per request (id, method, route, status, time), as text or as JSON
// lines, and never a token or a body.
#include <catch2/catch.hpp>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "tests/server/server_fixture.h"

using namespace runledger;
using runledger::testing::HttpClient;
using runledger::testing::ServerFixture;

namespace {

// Everything spdlog's default logger writes while it lives, message text only.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("%v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }

  std::vector<std::string> lines() {
    spdlog::default_logger()->flush();
    std::vector<std::string> out;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream out_;
};

constexpr const char* kSecretInBody = "secret-in-the-body-7f3a";

// A dispatch whose body carries a marker, a refused one, and an unknown token's request.
std::vector<std::string> exercise(ServerFixture& f) {
  auto c = f.client();
  std::vector<std::string> request_ids;
  const auto created = c.post("/v1/runs", {{"dispatch_key", "k"},
                                           {"thread_key", "t"},
                                           {"requester", "r"},
                                           {"input", {{"note", kSecretInBody}}}});
  REQUIRE(created.status == 201);
  request_ids.push_back(created.headers.at("X-Request-Id"));
  const auto refused = c.post("/v1/runs", {{"dispatch_key", kSecretInBody}, {"thread_key", 7}});
  REQUIRE(refused.status == 422);
  request_ids.push_back(refused.headers.at("X-Request-Id"));
  HttpClient stranger(f.http->port(), "unknown-token-in-the-header");
  const auto unknown = stranger.get("/v1/runs");
  REQUIRE(unknown.status == 401);
  request_ids.push_back(unknown.headers.at("X-Request-Id"));
  return request_ids;
}

void check_nothing_secret(const std::vector<std::string>& lines, const ServerFixture& f) {
  for (const auto& line : lines) {
    INFO(line);
    CHECK(line.find(f.bot_token) == std::string::npos);
    CHECK(line.find("unknown-token-in-the-header") == std::string::npos);
    CHECK(line.find(kSecretInBody) == std::string::npos);
  }
}

}  // namespace

TEST_CASE("the JSON request log (--log-format json) is an object per request, never a token") {
  CapturedLog log;
  server::Options o = ServerFixture::fast_options();
  o.json_log = true;
  ServerFixture f(o);
  const auto ids = exercise(f);
  const auto lines = log.lines();
  check_nothing_secret(lines, f);
  std::vector<nlohmann::json> requests;
  for (const auto& line : lines) {
    if (line.empty() || line[0] != '{') continue;  // the server's own notes
    const auto entry = nlohmann::json::parse(line);
    std::vector<std::string> keys;
    for (const auto& item : entry.items()) keys.push_back(item.key());
    CHECK(keys == std::vector<std::string>{"method", "ms", "request_id", "route", "status"});
    requests.push_back(entry);
  }
  REQUIRE(requests.size() == 3);
  CHECK(requests[0]["request_id"] == ids[0]);
  CHECK(requests[0]["method"] == "POST");
  CHECK(requests[0]["route"] == "runs.dispatch");
  CHECK(requests[0]["status"] == 201);
  CHECK(requests[0]["ms"].is_number());
  CHECK(requests[1]["request_id"] == ids[1]);
  CHECK(requests[1]["status"] == 422);
  CHECK(requests[2]["request_id"] == ids[2]);
  CHECK(requests[2]["route"] == "runs.list");
  CHECK(requests[2]["status"] == 401);
}

TEST_CASE("the text request log is a line per request: id, method, route, status, time") {
  CapturedLog log;
  ServerFixture f;
  const auto ids = exercise(f);
  const auto lines = log.lines();
  check_nothing_secret(lines, f);
  std::vector<std::string> requests;
  for (const auto& line : lines) {
    for (const auto& id : ids) {
      if (line.rfind(id + " ", 0) == 0) requests.push_back(line.substr(id.size() + 1));
    }
  }
  REQUIRE(requests.size() == 3);
  CHECK(requests[0].rfind("POST runs.dispatch 201 ", 0) == 0);
  CHECK(requests[1].rfind("POST runs.dispatch 422 ", 0) == 0);
  CHECK(requests[2].rfind("GET runs.list 401 ", 0) == 0);
  CHECK(requests[2].substr(requests[2].size() - 3) == " ms");
}
