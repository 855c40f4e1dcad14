// A plain HTTP/1.1 client for tests of the server: real sockets on loopback, one keep-alive
// connection per client, synchronous (Boost.Beast, in http_client.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace runledger::testing {

struct HttpAnswer {
  unsigned status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
  nlohmann::json json() const { return nlohmann::json::parse(body); }
  std::string code() const { return json().value("code", ""); }
};

class HttpClient {
 public:
  explicit HttpClient(std::uint16_t port, std::string token = "");
  ~HttpClient();
  HttpClient(HttpClient&&) noexcept;

  void set_token(std::string token) { token_ = std::move(token); }

  HttpAnswer request(const std::string& method, const std::string& target,
                     const std::string& body = "", const std::string& content_type = "",
                     const std::vector<std::pair<std::string, std::string>>& headers = {});
  HttpAnswer post(const std::string& target, const nlohmann::json& body) {
    return request("POST", target, body.dump(), "application/json");
  }
  HttpAnswer get(const std::string& target) { return request("GET", target); }

 private:
  struct Connection;
  std::uint16_t port_;
  std::string token_;
  std::unique_ptr<Connection> connection_;
};

// One request over TLS on a fresh connection, trusting only the certificate in `ca_file`
// (the server's own, when it is self-signed). Throws when the handshake or the check fails.
HttpAnswer tls_request(std::uint16_t port, const std::string& ca_file, const std::string& method,
                       const std::string& target, const std::string& token = "",
                       const std::string& body = "");

// Writes raw bytes to the server and reads whatever comes back until it closes (or `timeout`):
// for requests a well-behaved client would not send.
std::string raw_exchange(std::uint16_t port, const std::string& bytes,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace runledger::testing
