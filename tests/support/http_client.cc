#include "tests/support/http_client.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <optional>

namespace runledger::testing {
namespace {

HttpAnswer to_answer(const boost::beast::http::response<boost::beast::http::string_body>& res) {
  HttpAnswer answer;
  answer.status = res.result_int();
  answer.body = res.body();
  for (const auto& field : res) {
    answer.headers[std::string(field.name_string())] = std::string(field.value());
  }
  return answer;
}

}  // namespace

struct HttpClient::Connection {
  boost::asio::io_context io;
  std::optional<boost::beast::tcp_stream> stream;
};

HttpClient::HttpClient(std::uint16_t port, std::string token)
    : port_(port), token_(std::move(token)), connection_(std::make_unique<Connection>()) {}
HttpClient::~HttpClient() = default;
HttpClient::HttpClient(HttpClient&&) noexcept = default;

HttpAnswer HttpClient::request(const std::string& method, const std::string& target,
                               const std::string& body, const std::string& content_type,
                               const std::vector<std::pair<std::string, std::string>>& headers) {
  namespace http = boost::beast::http;
  auto& stream = connection_->stream;
  if (!stream) {
    stream.emplace(connection_->io);
    stream->connect(
        boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port_));
    stream->expires_never();
  }
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "127.0.0.1");
  if (!token_.empty()) req.set(http::field::authorization, "Bearer " + token_);
  if (!content_type.empty()) req.set(http::field::content_type, content_type);
  for (const auto& [name, value] : headers) req.set(name, value);
  req.body() = body;
  req.prepare_payload();
  http::write(*stream, req);
  boost::beast::flat_buffer buffer;
  std::optional<http::response_parser<http::string_body>> parser;
  do {  // an interim 100 Continue comes before the answer
    parser.emplace();
    parser->body_limit(1u << 30);
    http::read(*stream, buffer, *parser);
  } while (parser->get().result() == http::status::continue_);
  auto& res = parser->get();
  HttpAnswer answer = to_answer(res);
  if (!res.keep_alive()) stream.reset();
  return answer;
}

HttpAnswer tls_request(std::uint16_t port, const std::string& ca_file, const std::string& method,
                       const std::string& target, const std::string& token,
                       const std::string& body) {
  namespace http = boost::beast::http;
  namespace ssl = boost::asio::ssl;
  boost::asio::io_context io;
  ssl::context tls(ssl::context::tls_client);
  tls.load_verify_file(ca_file);
  tls.set_verify_mode(ssl::verify_peer);
  boost::beast::ssl_stream<boost::beast::tcp_stream> stream(io, tls);
  boost::beast::get_lowest_layer(stream).connect(
      boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  boost::beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(30));
  stream.handshake(ssl::stream_base::client);
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "127.0.0.1");
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req);
  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  http::read(stream, buffer, parser);
  return to_answer(parser.get());
}

std::string raw_exchange(std::uint16_t port, const std::string& bytes,
                         std::chrono::milliseconds timeout) {
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
