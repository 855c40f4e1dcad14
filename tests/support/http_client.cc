#include "tests/support/http_client.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <optional>
#include <stdexcept>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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

EventReader::EventReader(std::uint16_t port, const std::string& target, const std::string& token,
                         const std::string& last_event_id) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    throw std::runtime_error("EventReader: cannot connect");
  }
  std::string request =
      "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n";
  if (!token.empty()) request += "Authorization: Bearer " + token + "\r\n";
  if (!last_event_id.empty()) request += "Last-Event-ID: " + last_event_id + "\r\n";
  request += "\r\n";
  for (std::size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("EventReader: cannot send");
    sent += static_cast<std::size_t>(n);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::size_t end;
  while ((end = raw_.find("\r\n\r\n")) == std::string::npos) {
    if (!fill(deadline)) throw std::runtime_error("EventReader: no answer");
  }
  const std::string head = raw_.substr(0, end);
  raw_.erase(0, end + 4);
  status_ = static_cast<unsigned>(std::stoul(head.substr(head.find(' ') + 1, 3)));
  for (std::size_t at = head.find("\r\n"); at != std::string::npos;) {
    const std::size_t next = head.find("\r\n", at + 2);
    const std::string line = head.substr(at + 2, next == std::string::npos ? next : next - at - 2);
    const std::size_t colon = line.find(':');
    if (colon != std::string::npos) {
      headers_[line.substr(0, colon)] = line.substr(line.find_first_not_of(' ', colon + 1));
    }
    at = next;
  }
  chunked_ = headers_.count("Transfer-Encoding") && headers_["Transfer-Encoding"] == "chunked";
  if (!chunked_) {  // an error envelope, by its length
    const std::size_t length = std::stoul(headers_.at("Content-Length"));
    while (raw_.size() < length && fill(deadline)) {
    }
    body_ = raw_.substr(0, length);
    ended_ = true;
  }
}

EventReader::~EventReader() {
  close();
}

void EventReader::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool EventReader::fill(std::chrono::steady_clock::time_point deadline) {
  if (fd_ < 0) return false;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
  char buffer[64 * 1024];
  const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
  if (n <= 0) {
    ended_ = true;  // the server closed the connection
    return false;
  }
  raw_.append(buffer, static_cast<std::size_t>(n));
  return true;
}

bool EventReader::decode_chunks() {
  for (;;) {
    const std::size_t eol = raw_.find("\r\n");
    if (eol == std::string::npos) return true;
    const std::size_t size = std::stoul(raw_.substr(0, eol), nullptr, 16);
    if (size == 0) {
      ended_ = true;
      return false;
    }
    if (raw_.size() < eol + 2 + size + 2) return true;
    text_.append(raw_, eol + 2, size);
    raw_.erase(0, eol + 2 + size + 2);
  }
}

std::optional<ServerEvent> EventReader::next(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (chunked_) decode_chunks();
    for (std::size_t end; (end = text_.find("\n\n")) != std::string::npos;) {
      const std::string block = text_.substr(0, end);
      text_.erase(0, end + 2);
      ServerEvent event;
      bool any = false;
      for (std::size_t at = 0; at <= block.size();) {
        std::size_t eol = block.find('\n', at);
        if (eol == std::string::npos) eol = block.size();
        const std::string line = block.substr(at, eol - at);
        at = eol + 1;
        if (line.empty()) continue;
        if (line[0] == ':') {
          ++comments_;
          continue;
        }
        const std::size_t colon = line.find(':');
        const std::string field = line.substr(0, colon);
        std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
        if (!value.empty() && value[0] == ' ') value.erase(0, 1);
        any = true;
        if (field == "id") event.id = value;
        if (field == "event") event.event = value;
        if (field == "data") event.data += (event.data.empty() ? "" : "\n") + value;
      }
      if (any) return event;
    }
    if (ended_ || !fill(deadline)) return std::nullopt;
  }
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
