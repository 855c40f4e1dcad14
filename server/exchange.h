// One HTTP exchange as the routes see it: the parsed request, the caller, the answer. Private to
// server/.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokens/tokens.h"

namespace runledger::server {

struct Request {
  std::string method;                                      // "GET", "POST", ...
  std::string path;                                        // percent-decoded, without the query
  std::vector<std::pair<std::string, std::string>> query;  // percent-decoded, in order
  std::string content_type;  // the media type alone, lower-cased ("" when none was sent)
  std::string authorization;
  std::string idempotency_key;
  std::string body;
  std::string request_id;

  // The query parameter `name` (the first, when repeated).
  std::optional<std::string> parameter(std::string_view name) const;
};

struct Response {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;

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
