// The HTTP/JSON API: bots in any language claim, write ahead, settle and finish runs over HTTP.
//
// Contract:
//  - Routes (docs/design.md, "The HTTP API") are plain functions from a parsed request to a
//    response; expected outcomes (errors/errors.h) become the error envelope {code, message,
//    details, request_id, retryable} in one place, every response carries X-Request-Id, and no
//    response or log line carries a token or a whole payload.
//  - Every input is size-, depth- and shape-checked before it reaches the database: the body
//    limit is chosen by route from the header before the body is read (413 past it), JSON is
//    parsed strictly (wire/wire.h), fields are validated by name (422), unknown fields refused.
//  - Authentication (tokens/tokens.h) and the scope check come before any resource is looked up.
//  - Every write is safe to repeat: the same request after a lost answer returns the first
//    answer (dispatch by key, intents and completions by identity, finish by value, appends and
//    turns by expected_seq).
//  - HTTP slots: the newest incarnation of a slot (by first sight) owns the slot's runs; an older
//    one is refused for good (409 superseded), including its open long-polls.
//  - Database work runs on its own threads, never on an I/O thread, and no pooled connection is
//    held while a response is written to a client.
//
// Thread-safety: start() once, then stop() from any thread (once); port() after start().
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ledger/ledger.h"
#include "pg/pg.h"
#include "settlement/settlement.h"
#include "transcript/transcript.h"

namespace runledger::server {

struct Options {
  // Where to listen; port 0 picks a free port (port() says which).
  std::string address = "127.0.0.1";
  std::uint16_t port = 8080;
  // Threads that read and write HTTP.
  int io_threads = 2;
  // Threads that run database work (each holds at most one pooled connection at a time).
  int database_threads = 8;
  // Long-polling claims waiting at once (a thread each); one more is answered 503.
  int max_long_polls = 256;
  // Connections open at once; one more is answered 503 and closed.
  int max_connections = 1024;
  // A client that takes longer than this to send a request's header or body is disconnected.
  std::chrono::milliseconds read_timeout{30'000};
  // A keep-alive connection idle this long between requests is closed.
  std::chrono::milliseconds idle_timeout{60'000};
  // Bytes of request bodies larger than 1 MiB held in memory at once (beyond: 503).
  std::size_t large_bodies_in_flight = 512u << 20;
  // A body over its route's limit is read and discarded up to this, so that the client sees the
  // 413 answer; then the connection is closed.
  std::size_t discard_cap = 8u << 20;
  // A claim's long-poll looks again this often even without a notification (the fallback for a
  // notification lost to a reconnect, and how other servers' supersessions are seen).
  std::chrono::milliseconds claim_poll{1'000};
  // Transcript streams and waits on runs see a run move (an entry appended, the run ended)
  // within this: one thread reads every watched run's head and status this often.
  std::chrono::milliseconds tail_poll{100};
  // A transcript stream with nothing new sends a comment this often (proxies keep it open, and a
  // vanished reader is found).
  std::chrono::milliseconds stream_keepalive{15'000};
  // stop(): how long requests in flight may take to finish.
  std::chrono::milliseconds grace{10'000};
  // TLS: both, or neither (plain HTTP).
  std::optional<std::filesystem::path> tls_cert;
  std::optional<std::filesystem::path> tls_key;
  // Request log lines as JSON instead of text.
  bool json_log = false;
  // The libraries' options (lease_ttl and the other lease settings among them).
  ledger::Options ledger;
  transcript::Options transcript;
  settlement::Options settlement;
  // Tool effect classes for intents and settlement; unlisted tools are unsafe.
  settlement::EffectClasses effect_classes;
};

class Server {
 public:
  // `database_url` serves the server's own sessions (token notifications, claim wake-ups); `pool`
  // everything else.
  Server(pg::Pool& pool, std::string database_url, Options options);
  ~Server();  // stop()s if started
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving; throws InvalidArgument if the address cannot be bound.
  void start();
  std::uint16_t port() const;
  // Stops accepting, lets requests in flight finish within Options::grace, then closes every
  // connection. Returns when all threads have stopped.
  void stop();

  struct State;  // server.cc's

 private:
  std::unique_ptr<State> state_;
};

// The request parsing and validation entry point without any I/O or database (the fuzz target's):
// routes `method` and `target`, then reads `body` as the route would (content type, limits,
// strict JSON, fields). Throws runledger::Error for anything the API refuses; returns the route's
// name.
std::string check_request(std::string_view method, std::string_view target,
                          std::string_view content_type, std::string_view body);

}  // namespace runledger::server
