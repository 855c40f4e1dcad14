// The route table and what the routes share. Private to server/.
//
// A route is two plain functions: check(), which reads the request (path parameters, query,
// body) into what the route needs and refuses anything else, touching nothing; and serve(), which
// does it against the database. check() is what the fuzz target exercises (check_request()).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ids/ids.h"
#include "server/exchange.h"
#include "tokens/tokens.h"
#include "wire/wire.h"

namespace runledger::server {

struct Context;

inline constexpr std::size_t kMiB = 1u << 20;
// The largest transcript entry, and the largest JSON that carries one in base64.
inline constexpr std::size_t kMaxEntryBytes = 64 * kMiB;
inline constexpr std::size_t kMaxBase64EntryRequest = (kMaxEntryBytes + 2) / 3 * 4 + 64 * 1024;

enum class BodyKind { none, json, json_or_bytes };

struct Route {
  std::string_view method;
  std::string_view pattern;            // "/v1/runs/{}/steps/{}/complete": `{}` is a path parameter
  std::string_view name;               // for logs: "runs.dispatch"
  std::optional<tokens::Scope> scope;  // none: no authentication (health checks)
  BodyKind body;
  std::size_t body_limit;
  void (*check)(const Call&);
  Response (*serve)(Context&, const Call&);
  // Whether serve() may wait long (a claim's long-poll): it runs on threads of its own.
  bool (*waits)(const Call&) = nullptr;
};

// The route for `method` and `path`, with its path parameters; none when no route has the path
// (or none has it for this method).
const Route* find_route(std::string_view method, std::string_view path,
                        std::vector<std::string>& parameters);

// What the routes share to read requests.
// The body as one strict JSON object (wire::parse_json); UnsupportedMediaType unless the request
// says application/json.
nlohmann::json json_body(const Call& call);
// A path parameter that is a run id.
RunId run_parameter(const Call& call, std::size_t i);
// A path parameter that is a number from 1 (a step, a seq); NotFound naming `what` otherwise.
std::int64_t number_parameter(const Call& call, std::size_t i, std::string_view what);
// A query parameter as an integer in [min, max]; InvalidArgument naming it otherwise.
std::optional<std::int64_t> integer_parameter(const Call& call, std::string_view name,
                                              std::int64_t min, std::int64_t max);
// InvalidArgument naming the first query parameter not in `known`.
void only_parameters(const Call& call, std::initializer_list<std::string_view> known);
// A body that is {"generation": N} alone (release, settle), for a route on run parameter 0.
Generation generation_body(const Call& call);
// A key (ids/ids.h check_key) read from a field.
std::string key_field(wire::Object& body, std::string_view field);

// The routes, by family (each file's serve and check functions).
extern const std::vector<Route> kRunRoutes;         // runs.cc
extern const std::vector<Route> kClaimRoutes;       // claims.cc
extern const std::vector<Route> kStepRoutes;        // steps.cc
extern const std::vector<Route> kTranscriptRoutes;  // transcript_routes.cc
extern const std::vector<Route> kHealthRoutes;      // runs.cc

}  // namespace runledger::server
