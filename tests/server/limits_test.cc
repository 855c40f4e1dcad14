// The hardened edge: what the server refuses before anything reaches the database, and how it
// treats slow, large and odd clients.
#include <catch2/catch.hpp>

#include <boost/asio.hpp>
#include <thread>

#include "tests/server/server_fixture.h"

using namespace runledger;
using namespace std::chrono_literals;
using runledger::testing::HttpClient;
using runledger::testing::raw_exchange;
using runledger::testing::ServerFixture;

namespace {

std::string nested(int depth) {
  // {"dispatch_key": ..., "input": [[[...]]]}: the body is depth 1, so input adds depth - 1.
  std::string input(static_cast<std::size_t>(depth - 1), '[');
  input += std::string(static_cast<std::size_t>(depth - 1), ']');
  return R"({"dispatch_key":"d","thread_key":"t","requester":"r","input":)" + input + "}";
}

std::string request_head(const std::string& target, const std::string& token, std::size_t length,
                         const std::string& extra = "") {
  return "POST " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(length) +
         "\r\n" + extra + "\r\n";
}

}  // namespace

TEST_CASE("JSON nested 64 deep is accepted and 65 deep is 400") {
  ServerFixture f;
  auto c = f.client();
  CHECK(c.request("POST", "/v1/runs", nested(64), "application/json").status == 201);
  const auto deep = c.request("POST", "/v1/runs", nested(65), "application/json");
  CHECK(deep.status == 400);
  CHECK(deep.code() == "malformed");
  CHECK(c.request("POST", "/v1/runs", "[" + std::string(100000, '[') + "]", "application/json")
            .status == 400);
}

TEST_CASE("malformed JSON is 400, values PostgreSQL or a double would mangle are 422") {
  ServerFixture f;
  auto c = f.client();
  const auto post = [&](const std::string& body) {
    return c.request("POST", "/v1/runs", body, "application/json");
  };
  CHECK(post("{\"dispatch_key\": ").status == 400);
  CHECK(post("{\"dispatch_key\": \"\xff\xfe\"}").status == 400);  // invalid UTF-8
  const auto nul = post(R"({"dispatch_key":"a\u0000b","thread_key":"t","requester":"r"})");
  CHECK(nul.status == 422);
  CHECK(nul.json()["details"]["field"] == "/dispatch_key");
  const auto big = post(
      R"({"dispatch_key":"k","thread_key":"t","requester":"r","input":{"n":18446744073709551616}})");
  CHECK(big.status == 422);
  const auto twice =
      post(R"({"dispatch_key":"k","dispatch_key":"k2","thread_key":"t","requester":"r"})");
  CHECK(twice.status == 422);
  CHECK(twice.json()["details"]["field"] == "/dispatch_key");
  const auto wrong_type = c.request("POST", "/v1/runs", "dispatch_key=k", "text/plain");
  CHECK(wrong_type.status == 415);
  CHECK(wrong_type.code() == "unsupported_media_type");
  CHECK(c.get("/v1/runs?status=queued").json()["runs"].empty());
}

TEST_CASE(
    "a body over its route's limit is 413, raw or in base64, and the client sees the answer") {
  ServerFixture f;
  auto c = f.client();
  // A 1 MiB route (claims): refused from the header, the body read and discarded.
  const std::string big(static_cast<std::size_t>(1.5 * (1 << 20)), ' ');
  const auto over = c.request("POST", "/v1/runs/claim", big, "application/json");
  CHECK(over.status == 413);
  CHECK(over.code() == "too_large");

  f.dispatch(c, "k");
  const auto [run, generation] = f.claim_one(c, "py-1");
  const std::string path = "/v1/runs/" + run + "/transcript";
  // Raw: one byte over 64 MiB, announced in Content-Length.
  {
    const std::size_t length = (64u << 20) + 1;
    const std::string head =
        "POST " + path + "?generation=" + std::to_string(generation) +
        "&kind=user HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + f.bot_token +
        "\r\nContent-Type: application/octet-stream\r\nContent-Length: " + std::to_string(length) +
        "\r\nExpect: 100-continue\r\n\r\n";
    const std::string answer = raw_exchange(f.http->port(), head);
    CHECK(answer.rfind("HTTP/1.1 413", 0) == 0);
  }
  // Base64: a 64 MiB + 1 entry, within the JSON route's limit, refused once decoded.
  {
    const std::string entry((64u << 20) + 1, 'x');
    const auto answer = c.post(
        path,
        {{"generation", generation}, {"kind", "user"}, {"body_base64", testing::base64(entry)}});
    CHECK(answer.status == 413);
  }
  CHECK(c.get("/v1/runs/" + run).json()["transcript"]["seq"] == 0);
}

TEST_CASE("Expect: 100-continue is answered, so large uploads do not stall") {
  ServerFixture f;
  auto c = f.client();
  f.dispatch(c, "k");
  const auto [run, generation] = f.claim_one(c, "py-1");
  const std::string entry(2u << 20, 'y');
  const auto answer = c.request(
      "POST",
      "/v1/runs/" + run + "/transcript?generation=" + std::to_string(generation) + "&kind=user",
      entry, "application/octet-stream", {{"Expect", "100-continue"}});
  CHECK(answer.status == 200);
  CHECK(c.get("/v1/runs/" + run + "/transcript/1").body == entry);
}

TEST_CASE("headers over 16 KiB are 431") {
  ServerFixture f;
  const std::string request =
      "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(17 * 1024, 'a') + "\r\n\r\n";
  CHECK(raw_exchange(f.http->port(), request).rfind("HTTP/1.1 431", 0) == 0);
}

TEST_CASE("a slow client is timed out while others are served") {
  auto options = ServerFixture::fast_options();
  options.read_timeout = 500ms;
  ServerFixture f(options);
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket slow(io);
  slow.connect({boost::asio::ip::make_address("127.0.0.1"), f.http->port()});
  const std::string head = request_head("/v1/runs/claim", f.bot_token, 100);
  boost::asio::write(slow, boost::asio::buffer(head + "{\"slot\""));  // and then nothing
  auto c = f.client();
  for (int i = 0; i < 5; ++i) CHECK(c.get("/healthz").status == 200);
  std::this_thread::sleep_for(1s);
  char buf[256];
  boost::system::error_code ec;
  slow.read_some(boost::asio::buffer(buf), ec);  // closed by the server: EOF
  CHECK(ec == boost::asio::error::eof);
}

TEST_CASE("past the connection cap a connection is answered 503, retryable") {
  auto options = ServerFixture::fast_options();
  options.max_connections = 2;
  ServerFixture f(options);
  HttpClient a(f.http->port(), f.bot_token);
  HttpClient b(f.http->port(), f.bot_token);
  REQUIRE(a.get("/healthz").status == 200);
  REQUIRE(b.get("/healthz").status == 200);
  HttpClient third(f.http->port(), f.bot_token);
  const auto refused = third.get("/healthz");
  CHECK(refused.status == 503);
  CHECK(refused.json()["retryable"] == true);
  CHECK(refused.headers.count("Retry-After") == 1);
}
