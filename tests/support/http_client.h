// A plain HTTP/1.1 client for tests of the server: real sockets on loopback, one keep-alive
// connection per client, synchronous (Boost.Beast, in http_client.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
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

// A reader of one Server-Sent Events answer (GET with Accept: text/event-stream) on a connection
// of its own: it decodes the chunked body itself, so that it can wait for the next event with a
// timeout and go on reading after it.
struct ServerEvent {
  std::string id;
  std::string event;
  std::string data;
  nlohmann::json json() const { return nlohmann::json::parse(data); }
};

class EventReader {
 public:
  EventReader(std::uint16_t port, const std::string& target, const std::string& token,
              const std::string& last_event_id = "");
  ~EventReader();

  // The answer's status and headers (for an error, `body` holds its envelope).
  unsigned status() const { return status_; }
  const std::map<std::string, std::string>& headers() const { return headers_; }
  const std::string& body() const { return body_; }

  // The next event within `timeout`; none at the timeout or once the stream has ended.
  std::optional<ServerEvent> next(std::chrono::milliseconds timeout);
  // Whether the server ended the stream (its last chunk) or closed the connection.
  bool ended() const { return ended_; }
  // Comment lines (keep-alives) read so far.
  int comments() const { return comments_; }
  // Closes the connection from this side.
  void close();

 private:
  bool fill(std::chrono::steady_clock::time_point deadline);  // false at the deadline or EOF
  bool decode_chunks();  // moves whole chunks from raw_ to text_; false on the last chunk

  int fd_ = -1;
  unsigned status_ = 0;
  std::map<std::string, std::string> headers_;
  std::string body_;
  std::string raw_;   // bytes read, not yet decoded
  std::string text_;  // decoded body, not yet parsed into events
  bool chunked_ = false;
  bool ended_ = false;
  int comments_ = 0;
};

// Writes raw bytes to the server and reads whatever comes back until it closes (or `timeout`):
// for requests a well-behaved client would not send.
std::string raw_exchange(std::uint16_t port, const std::string& bytes,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace runledger::testing
