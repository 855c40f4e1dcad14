// The Beast side of the server: accepting, reading a request (header first, then the body under
// its route's limit), handing it to the database threads, writing the answer; and stopping.
#include "server/server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cmath>
#include <list>
#include <mutex>
#include <thread>

#include "errors/errors.h"
#include "ids/ids.h"
#include "server/context.h"
#include "server/envelope.h"
#include "server/routes.h"

namespace runledger::server {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kHeaderLimit = 16 * 1024;
// Bodies above this count against Options::large_bodies_in_flight.
constexpr std::size_t kLargeBody = kMiB;

std::string_view view(boost::beast::string_view text) {
  return {text.data(), text.size()};
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The media type alone: "application/json; charset=utf-8" -> "application/json".
std::string media_type(std::string_view header) {
  const std::size_t semicolon = header.find(';');
  std::string_view type = header.substr(0, semicolon);
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.remove_prefix(1);
  return lower(type);
}

std::size_t body_limit(const Route& route, std::string_view content_type) {
  if (route.body == BodyKind::none) return 0;
  if (route.body == BodyKind::json_or_bytes && content_type == "application/octet-stream") {
    return kMaxEntryBytes;
  }
  return route.body_limit;
}

// Bytes of large bodies held at once.
class BodyBudget {
 public:
  explicit BodyBudget(std::size_t total) : left_(total) {}
  bool take(std::size_t bytes) {
    std::lock_guard lock(mu_);
    if (bytes > left_) return false;
    left_ -= bytes;
    return true;
  }
  void give(std::size_t bytes) {
    std::lock_guard lock(mu_);
    left_ += bytes;
  }

 private:
  std::mutex mu_;
  std::size_t left_;
};

class SessionBase {
 public:
  virtual ~SessionBase() = default;
  virtual void close_if_idle() = 0;
};

}  // namespace

struct Server::State {
  State(pg::Pool& pool, std::string url, Options o)
      : options(std::move(o)),
        context(pool, url, options),
        database_threads(static_cast<std::size_t>(options.database_threads)),
        bodies(options.large_bodies_in_flight),
        io(options.io_threads) {}

  // Destroyed last to first: the io_context (and the sessions its pending handlers hold) goes
  // before the counters those sessions touch, the context after everything that uses it.
  Options options;
  Context context;
  net::thread_pool database_threads;
  BodyBudget bodies;
  std::atomic<int> connections{0};
  std::atomic<int> long_polls{0};
  std::atomic<int> in_flight{0};
  std::atomic<bool> draining{false};
  std::mutex sessions_mu;
  std::list<std::weak_ptr<SessionBase>> sessions;
  std::optional<ssl::context> tls;
  std::vector<std::thread> io_threads;
  bool started = false;
  bool stopped = false;
  net::io_context io;
  // Without it the I/O threads return from run() once a drain leaves no socket operation
  // pending, and an answer computed after that (a long-poll woken by stop()) is never written.
  std::optional<net::executor_work_guard<net::io_context::executor_type>> io_work;
  std::optional<tcp::acceptor> acceptor;

  void accept();
  void log(const Request& request, std::string_view route, unsigned status, Clock::time_point t0);

  // Authenticates, checks the scope, serves; every outcome becomes an answer here.
  Response answer(const Request& request, const Route& route, std::vector<std::string> parameters) {
    try {
      Call call{request, std::move(parameters), std::nullopt};
      if (route.scope) {
        const std::string& header = request.authorization;
        constexpr std::string_view kBearer = "Bearer ";
        if (header.empty()) throw Unauthenticated("this route needs Authorization: Bearer <token>");
        if (header.size() <= kBearer.size() ||
            lower(header.substr(0, kBearer.size())) != "bearer ") {
          throw Unauthenticated("the Authorization header must be Bearer <token>");
        }
        tokens::TokenInfo info = context.tokens.authenticate(header.substr(kBearer.size()));
        if (!tokens::covers(info.scope, *route.scope)) {
          throw Forbidden("a " + std::string(tokens::to_string(info.scope)) +
                              " token may not use this route (it needs scope " +
                              std::string(tokens::to_string(*route.scope)) + ")",
                          {{"scope", tokens::to_string(info.scope)},
                           {"needed", tokens::to_string(*route.scope)}});
        }
        call.caller = std::move(info);
      }
      return route.serve(context, call);
    } catch (...) {
      return current_error_response(request.request_id);
    }
  }
};

namespace {

template <class Stream>
class Session : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(Server::State& server, Stream stream) : server_(server), stream_(std::move(stream)) {}
  ~Session() override {
    end_request();
    --server_.connections;
  }

  void start(bool over_capacity) {
    over_capacity_ = over_capacity;
    if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
      beast::get_lowest_layer(stream_).expires_after(server_.options.read_timeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (!ec) self->read_header();
                              });
    } else {
      read_header();
    }
  }

  void close_if_idle() override {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] {
      if (self->idle_) self->close();
    });
  }

 private:
  void read_header() {
    idle_ = true;
    if (server_.draining) return close();
    header_.emplace();
    header_->header_limit(kHeaderLimit);
    header_->body_limit(std::numeric_limits<std::uint64_t>::max());  // chosen per route below
    beast::get_lowest_layer(stream_).expires_after(server_.options.idle_timeout);
    http::async_read_header(stream_, buffer_, *header_,
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                              self->on_header(ec);
                            });
  }

  void on_header(beast::error_code ec) {
    idle_ = false;
    if (!ec) begin_request();
    started_ = Clock::now();
    request_ = Request{};
    request_.request_id = random_request_id();
    if (ec == http::error::header_limit) {
      return fail_and_close(
          Response::json(431, envelope("header_too_large", "the request's headers exceed 16 KiB")));
    }
    if (ec) return close();  // end of stream, a timeout, garbage: nobody to answer
    auto& header = header_->get();
    request_.method = std::string(header.method_string());
    request_.content_type = media_type(view(header[http::field::content_type]));
    request_.authorization = std::string(header[http::field::authorization]);
    request_.idempotency_key = std::string(header["Idempotency-Key"]);
    request_.accept = std::string(header[http::field::accept]);
    request_.last_event_id = std::string(header["Last-Event-ID"]);
    keep_alive_ = header.keep_alive();
    if (over_capacity_) {
      return fail_and_close(error_response(Unavailable("the server is at its connection limit"),
                                           request_.request_id));
    }
    try {
      parse_target(std::string_view(header.target().data(), header.target().size()), request_);
    } catch (...) {
      return fail_and_close(current_error_response(request_.request_id));
    }
    route_ = find_route(request_.method, request_.path, parameters_);
    const auto length = header_->content_length();
    const bool has_body = (length && *length > 0) || header_->chunked();
    if (!route_) {
      auto r = error_response(
          NotFound("no route for " + request_.method + " " + request_.path.substr(0, 200)),
          request_.request_id);
      return has_body ? discard_then(std::move(r)) : respond(std::move(r));
    }
    limit_ = body_limit(*route_, request_.content_type);
    const bool expects_continue = lower(view(header[http::field::expect])) == "100-continue";
    if (length && *length > limit_) {
      auto r =
          error_response(TooLarge("the body is larger than this route takes", {{"limit", limit_}}),
                         request_.request_id);
      // A client waiting for 100 Continue has sent nothing yet: it reads the answer now.
      if (expects_continue) return fail_and_close(std::move(r));
      return discard_then(std::move(r));
    }
    const std::size_t reserve = length ? static_cast<std::size_t>(*length) : limit_;
    if (reserve > kLargeBody) {
      if (!server_.bodies.take(reserve)) {
        auto r =
            error_response(Unavailable("too many large request bodies in flight; retry shortly"),
                           request_.request_id);
        // As for 413: a client still sending would see a reset, not the answer.
        if (expects_continue) return fail_and_close(std::move(r));
        return discard_then(std::move(r));
      }
      reserved_ = reserve;
    }
    if (expects_continue) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      return http::async_write(
          stream_, *cont,
          [self = this->shared_from_this(), cont](beast::error_code e, std::size_t) {
            if (e) return self->close();
            self->read_body();
          });
    }
    read_body();
  }

  void read_body() {
    body_.emplace(std::move(*header_));
    body_->body_limit(limit_);
    beast::get_lowest_layer(stream_).expires_after(server_.options.read_timeout);
    http::async_read(stream_, buffer_, *body_,
                     [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                       self->on_body(ec);
                     });
  }

  void on_body(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      release_reservation();
      return fail_and_close(
          error_response(TooLarge("the body is larger than this route takes", {{"limit", limit_}}),
                         request_.request_id));
    }
    if (ec) {
      release_reservation();
      return close();  // a slow or vanished client
    }
    request_.body = std::move(body_->get().body());
    body_.reset();
    dispatch();
  }

  // Reads and drops the body (up to Options::discard_cap) so that the client sees `answer`.
  void discard_then(Response answer) {
    pending_ = std::move(answer);
    discard_.emplace(std::move(*header_));
    discard_->body_limit(server_.options.discard_cap);
    beast::get_lowest_layer(stream_).expires_after(server_.options.read_timeout);
    discard_some();
  }

  void discard_some() {
    discard_->get().body().data = scratch_;
    discard_->get().body().size = sizeof scratch_;
    http::async_read_some(stream_, buffer_, *discard_,
                          [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                            if (ec == http::error::need_buffer) ec = {};
                            if (!ec && !self->discard_->is_done()) return self->discard_some();
                            if (ec && ec != http::error::body_limit) return self->close();
                            self->fail_and_close(std::move(self->pending_));
                          });
  }

  void dispatch() {
    bool long_poll = route_->waits && route_->waits(Call{request_, parameters_, std::nullopt});
    if (long_poll && ++server_.long_polls > server_.options.max_long_polls) {
      --server_.long_polls;
      release_reservation();
      return respond(error_response(Unavailable("too many claims are long-polling; retry shortly"),
                                    request_.request_id));
    }
    auto work = [self = this->shared_from_this(), long_poll]() mutable {
      Response response = self->server_.answer(self->request_, *self->route_, self->parameters_);
      Server::State& server = self->server_;
      net::post(self->stream_.get_executor(), [self, r = std::move(response)]() mutable {
        self->release_reservation();
        self->request_.body.clear();
        self->request_.body.shrink_to_fit();
        self->respond(std::move(r));
      });
      self.reset();
      if (long_poll) --server.long_polls;  // last: stop() waits for it before the io stops
    };
    if (long_poll) {
      // A thread of its own: it mostly sleeps, and the database threads stay free.
      std::thread(std::move(work)).detach();
    } else {
      net::post(server_.database_threads, std::move(work));
    }
  }

  void respond(Response r) {
    if (r.events) return begin_events(std::move(r));
    write(std::move(r), keep_alive_ && !server_.draining);
  }
  void fail_and_close(Response r) { write(std::move(r), false); }

  void write(Response r, bool keep_alive) {
    auto response = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(r.status), 11);
    response->set(http::field::server, "runledger");
    response->set(http::field::content_type, r.content_type);
    response->set("X-Request-Id", request_.request_id);
    for (const auto& [name, value] : r.headers) response->set(name, value);
    response->keep_alive(keep_alive);
    response->body() = std::move(r.body);
    response->prepare_payload();
    server_.log(request_, route_ ? route_->name : std::string_view("-"), r.status, started_);
    beast::get_lowest_layer(stream_).expires_after(server_.options.read_timeout);
    http::async_write(
        stream_, *response,
        [self = this->shared_from_this(), response, keep_alive](beast::error_code ec, std::size_t) {
          self->end_request();
          if (ec || !keep_alive) return self->close();
          self->route_ = nullptr;
          self->read_header();
        });
  }

  // An event stream: chunked, on a connection of its own to the end. One thing at a time: a piece
  // made (database thread), a piece or a keep-alive written, or a wait on the run watch.
  void begin_events(Response r) {
    events_.emplace();
    events_->source = std::move(r.events);
    auto head = std::make_shared<http::response<http::empty_body>>(http::status::ok, 11);
    head->set(http::field::server, "runledger");
    head->set(http::field::content_type, "text/event-stream");
    head->set(http::field::cache_control, "no-store");
    head->set("X-Request-Id", request_.request_id);
    for (const auto& [name, value] : r.headers) head->set(name, value);
    head->keep_alive(false);
    head->chunked(true);
    auto serializer = std::make_shared<http::response_serializer<http::empty_body>>(*head);
    server_.log(request_, route_->name, 200, started_);
    beast::get_lowest_layer(stream_).expires_after(server_.options.read_timeout);
    http::async_write_header(
        stream_, *serializer,
        [self = this->shared_from_this(), head, serializer](beast::error_code ec, std::size_t) {
          if (ec) return self->end_events();
          // A reader sends nothing more: a read that completes means it went away. It has no
          // timeout; the writes have theirs (expires_after leaves a pending read's alone).
          beast::get_lowest_layer(self->stream_).expires_never();
          self->stream_.async_read_some(
              net::buffer(self->probe_),
              [self](beast::error_code, std::size_t) { self->end_events(); });
          self->next_piece();
        });
  }

  void next_piece() {
    events_->busy = true;
    net::post(server_.database_threads,
              [self = this->shared_from_this(), source = events_->source] {
                std::optional<EventStream::Piece> piece;
                try {
                  piece = source->next();
                } catch (const std::exception& e) {
                  spdlog::info("{} event stream ends: {}", self->request_.request_id, e.what());
                }
                net::post(self->stream_.get_executor(), [self, piece = std::move(piece)]() mutable {
                  self->on_piece(std::move(piece));
                });
              });
  }

  void on_piece(std::optional<EventStream::Piece> piece) {
    events_->busy = false;
    if (events_->over) return;
    if (!piece) return finish_events();  // without its last event: the reader reconnects
    const bool last = piece->last || server_.draining;
    if (!piece->text.empty()) {
      return write_piece(std::move(piece->text), [this, last] {
        if (last) return finish_events();
        next_piece();
      });
    }
    if (last) return finish_events();
    const auto watched = events_->source->watched();
    events_->watching = server_.context.watch.watch(
        watched.run, watched.seen_seq, [self = this->shared_from_this()] {
          net::post(self->stream_.get_executor(), [self] { self->on_woken(); });
        });
    arm_keepalive();
  }

  void on_woken() {
    if (!events_ || events_->over) return;
    events_->watching.reset();
    if (keepalive_) keepalive_->cancel();
    if (events_->busy) {
      events_->woken = true;  // a keep-alive is being written
      return;
    }
    next_piece();
  }

  void arm_keepalive() {
    if (!keepalive_) keepalive_.emplace(stream_.get_executor());
    keepalive_->expires_after(server_.options.stream_keepalive);
    keepalive_->async_wait([self = this->shared_from_this()](beast::error_code ec) {
      auto& events = *self->events_;
      if (ec || events.over || events.busy || !events.watching) return;
      self->write_piece(": keep-alive\n\n", [self] {
        if (!self->events_->woken) return self->arm_keepalive();
        self->events_->woken = false;
        self->next_piece();
      });
    });
  }

  template <class Then>
  void write_piece(std::string text, Then then) {
    events_->busy = true;
    auto buffer = std::make_shared<std::string>(std::move(text));
    // A reader that stops reading is let go; a large piece gets a second per MiB more.
    beast::get_lowest_layer(stream_).expires_after(server_.options.read_timeout +
                                                   std::chrono::seconds(buffer->size() >> 20));
    net::async_write(stream_, http::make_chunk(net::buffer(*buffer)),
                     [self = this->shared_from_this(), buffer, then = std::move(then)](
                         beast::error_code ec, std::size_t) mutable {
                       self->events_->busy = false;
                       if (ec || self->events_->over) return self->end_events();
                       then();
                     });
  }

  void finish_events() {
    stop_events();
    beast::get_lowest_layer(stream_).expires_after(server_.options.read_timeout);
    net::async_write(
        stream_, http::make_chunk_last(),
        [self = this->shared_from_this()](beast::error_code, std::size_t) { self->close(); });
  }

  // The reader went away, or a write failed.
  void end_events() {
    if (!events_->over) stop_events();
    close();
  }

  void stop_events() {
    events_->over = true;
    if (events_->watching) server_.context.watch.cancel(*events_->watching);
    events_->watching.reset();
    if (keepalive_) keepalive_->cancel();
  }

  // A request is in flight from its header to its answer written (stop() waits for it).
  void begin_request() {
    if (!counted_) ++server_.in_flight;
    counted_ = true;
  }
  void end_request() {
    if (counted_) --server_.in_flight;
    counted_ = false;
  }

  void close() {
    end_request();
    beast::error_code ignored;
    if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
      beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    } else {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
    beast::get_lowest_layer(stream_).close();
  }

  void release_reservation() {
    if (reserved_) server_.bodies.give(reserved_);
    reserved_ = 0;
  }

  static std::string random_request_id() {
    std::string id = random_uuid();
    id.erase(std::remove(id.begin(), id.end(), '-'), id.end());
    return id.substr(0, 20);
  }

  static nlohmann::json envelope(std::string_view code, std::string_view message) {
    return {{"code", code},
            {"message", message},
            {"details", nlohmann::json::object()},
            {"retryable", false}};
  }

  Server::State& server_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> header_;
  std::optional<http::request_parser<http::string_body>> body_;
  std::optional<http::request_parser<http::buffer_body>> discard_;
  char scratch_[16 * 1024];
  Request request_;
  const Route* route_ = nullptr;
  std::vector<std::string> parameters_;
  std::size_t limit_ = 0;
  std::size_t reserved_ = 0;
  Response pending_;
  Clock::time_point started_;
  bool keep_alive_ = true;
  bool idle_ = true;
  bool over_capacity_ = false;
  bool counted_ = false;
  struct Events {
    std::shared_ptr<EventStream> source;
    std::optional<RunWatch::Id> watching;
    bool busy = false;   // a piece is being made or written
    bool woken = false;  // the watch fired while a keep-alive was written
    bool over = false;   // nothing more is written
  };
  std::optional<Events> events_;
  std::optional<net::steady_timer> keepalive_;
  char probe_[1];
};

}  // namespace

void Server::State::log(const Request& request, std::string_view route, unsigned status,
                        Clock::time_point t0) {
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (options.json_log) {
    spdlog::info(nlohmann::json{{"request_id", request.request_id},
                                {"method", request.method},
                                {"route", route},
                                {"status", status},
                                {"ms", std::round(ms * 10) / 10}}
                     .dump());
  } else {
    spdlog::info("{} {} {} {} {:.1f} ms", request.request_id, request.method, route, status, ms);
  }
}

void Server::State::accept() {
  acceptor->async_accept(net::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (!acceptor->is_open()) return;  // stopped
      spdlog::warn("server: accept: {}", ec.message());
      return accept();
    }
    const bool over = ++connections > options.max_connections;
    std::shared_ptr<SessionBase> session;
    if (tls) {
      auto s = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
          *this, beast::ssl_stream<beast::tcp_stream>(beast::tcp_stream(std::move(socket)), *tls));
      s->start(over);
      session = s;
    } else {
      auto s =
          std::make_shared<Session<beast::tcp_stream>>(*this, beast::tcp_stream(std::move(socket)));
      s->start(over);
      session = s;
    }
    {
      std::lock_guard lock(sessions_mu);
      sessions.remove_if([](const auto& w) { return w.expired(); });
      sessions.push_back(session);
    }
    accept();
  });
}

Context::Context(pg::Pool& p, const std::string& url, const Options& o)
    : options(o),
      pool(p),
      ledger(p, o.ledger),
      store(p, ledger, o.transcript),
      settler(ledger, store, o.effect_classes, o.settlement),
      tokens(p),
      slots(p),
      waiters(url),
      watch(ledger, store, o.tail_poll) {}

Server::Server(pg::Pool& pool, std::string database_url, Options options)
    : state_(std::make_unique<State>(pool, std::move(database_url), std::move(options))) {}

Server::~Server() {
  stop();
}

void Server::start() {
  auto& s = *state_;
  if (s.options.tls_cert.has_value() != s.options.tls_key.has_value()) {
    throw InvalidArgument("TLS needs both a certificate and a key", {{"field", "tls_cert"}});
  }
  if (s.options.tls_cert) {
    s.tls.emplace(ssl::context::tls_server);
    s.tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    try {
      s.tls->use_certificate_chain_file(s.options.tls_cert->string());
      s.tls->use_private_key_file(s.options.tls_key->string(), ssl::context::pem);
    } catch (const std::exception& e) {
      throw InvalidArgument(std::string("TLS certificate or key: ") + e.what(),
                            {{"field", "tls_cert"}});
    }
  }
  beast::error_code ec;
  const auto address = net::ip::make_address(s.options.address, ec);
  if (ec) throw InvalidArgument("not an IP address: " + s.options.address, {{"field", "listen"}});
  const tcp::endpoint endpoint(address, s.options.port);
  s.acceptor.emplace(net::make_strand(s.io));
  s.acceptor->open(endpoint.protocol(), ec);
  if (!ec) s.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor->bind(endpoint, ec);
  if (!ec) s.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    throw InvalidArgument("cannot listen on " + s.options.address + ":" +
                              std::to_string(s.options.port) + ": " + ec.message(),
                          {{"field", "listen"}});
  }
  s.accept();
  s.io_work.emplace(s.io.get_executor());
  for (int i = 0; i < s.options.io_threads; ++i) s.io_threads.emplace_back([&s] { s.io.run(); });
  s.started = true;
}

std::uint16_t Server::port() const {
  return state_->acceptor->local_endpoint().port();
}

void Server::stop() {
  auto& s = *state_;
  if (!s.started || s.stopped) return;
  s.stopped = true;
  s.draining = true;
  net::post(s.acceptor->get_executor(), [&s] {
    beast::error_code ignored;
    s.acceptor->close(ignored);
  });
  // Long-polls answer what they have; idle keep-alive connections close; the rest finish.
  s.context.waiters.shut_down();
  s.context.watch.shut_down();
  const auto close_idle = [&s] {
    std::lock_guard lock(s.sessions_mu);
    for (auto& weak : s.sessions) {
      if (auto session = weak.lock()) session->close_if_idle();
    }
  };
  close_idle();
  const auto deadline = Clock::now() + s.options.grace;
  while (s.in_flight > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  close_idle();
  // Long-polls were woken at the start; each ends with the claim it is making.
  while (s.long_polls > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.io_work.reset();
  s.io.stop();
  for (auto& t : s.io_threads) t.join();
  s.database_threads.join();
}

}  // namespace runledger::server
