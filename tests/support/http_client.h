// A plain HTTP/1.1 client for tests of the server: real sockets on loopback, one keep-alive
// connection per client, synchronous (Boost.Beast).
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <map>
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
  explicit HttpClient(std::uint16_t port, std::string token = "")
      : port_(port), token_(std::move(token)) {}

  void set_token(std::string token) { token_ = std::move(token); }

  HttpAnswer request(const std::string& method, const std::string& target,
                     const std::string& body = "", const std::string& content_type = "",
                     const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    namespace http = boost::beast::http;
    connect();
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.set(http::field::host, "127.0.0.1");
    if (!token_.empty()) req.set(http::field::authorization, "Bearer " + token_);
    if (!content_type.empty()) req.set(http::field::content_type, content_type);
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = body;
    req.prepare_payload();
    http::write(*stream_, req);
    boost::beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(1u << 30);
    http::read(*stream_, buffer, parser);
    auto& res = parser.get();
    HttpAnswer answer;
    answer.status = res.result_int();
    answer.body = res.body();
    for (const auto& field : res) {
      answer.headers[std::string(field.name_string())] = std::string(field.value());
    }
    if (!res.keep_alive()) stream_.reset();
    return answer;
  }

  HttpAnswer post(const std::string& target, const nlohmann::json& body) {
    return request("POST", target, body.dump(), "application/json");
  }
  HttpAnswer get(const std::string& target) { return request("GET", target); }

 private:
  void connect() {
    if (stream_) return;
    stream_.emplace(io_);
    stream_->connect(
        boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port_));
    stream_->expires_never();
  }

  boost::asio::io_context io_;
  std::uint16_t port_;
  std::string token_;
  std::optional<boost::beast::tcp_stream> stream_;
};

// Writes raw bytes to the server and reads whatever comes back until it closes (or `timeout`):
// for requests a well-behaved client would not send.
inline std::string raw_exchange(std::uint16_t port, const std::string& bytes,
                                std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  boost::asio::io_context io;
  boost::beast::tcp_stream stream(io);
  stream.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  stream.expires_after(timeout);
  boost::asio::write(stream.socket(), boost::asio::buffer(bytes));
  std::string out;
  char buf[4096];
  boost::beast::error_code ec;
  for (;;) {
    const std::size_t n = stream.socket().read_some(boost::asio::buffer(buf), ec);
    out.append(buf, n);
    if (ec) break;
  }
  return out;
}

}  // namespace runledger::testing
