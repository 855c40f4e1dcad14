// One HTTP exchange as the routes see it: the parsed request, the caller, the answer. Private to
// server/.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ids/ids.h"
#include "tokens/tokens.h"

namespace runledger::server {

struct Request {
  std::string method;                                      // "GET", "POST", ...
  std::string path;                                        // percent-decoded, without the query
  std::vector<std::pair<std::string, std::string>> query;  // percent-decoded, in order
  std::string content_type;  // the media type alone, lower-cased ("" when none was sent)
  std::string authorization;
  std::string idempotency_key;
  std::string accept;         // as sent
  std::string last_event_id;  // a reconnecting event stream's Last-Event-ID ("" when none)
  std::string body;
  std::string request_id;

  // The query parameter `name` (the first, when repeated).
  std::optional<std::string> parameter(std::string_view name) const;
};

// The body of a Server-Sent Events answer, made a piece at a time on a database thread (so no
// pooled connection is held while a slow reader drains it); between pieces the session waits on
// the run watch until watched() moves.
class EventStream {
 public:
  virtual ~EventStream() = default;
  struct Piece {
    std::string text;   // whole events; empty when nothing is new
    bool last = false;  // the stream is complete after `text`
  };
  // Throws when it cannot go on (the stream then ends without its last event: the reader
  // reconnects).
  virtual Piece next() = 0;
  struct Watched {
    RunId run;
    std::int64_t seen_seq;
  };
  virtual Watched watched() const = 0;
};

struct Response {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  // Set: the answer is this stream (text/event-stream), and `body` is unused.
  std::shared_ptr<EventStream> events;

  static Response json(unsigned status, const nlohmann::json& body);
};

// A request routed: its path parameters (the `{...}` segments, in order) and, for routes that
// need one, the authenticated caller.
struct Call {
  const Request& request;
  std::vector<std::string> parameters;
  std::optional<tokens::TokenInfo> caller;
};

// "/v1/runs/abc?limit=2" split and percent-decoded; Malformed for a bad escape.
void parse_target(std::string_view target, Request& into);

}  // namespace runledger::server
