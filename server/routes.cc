// Routing, and what the routes share to read a request.
#include "server/routes.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "errors/errors.h"
#include "ids/ids.h"
#include "server/server.h"

namespace runledger::server {
namespace {

// Whether `path` fits `pattern`, collecting the `{}` segments.
bool matches(std::string_view pattern, std::string_view path, std::vector<std::string>& out) {
  out.clear();
  while (!pattern.empty() || !path.empty()) {
    if (pattern.empty() || path.empty() || pattern[0] != '/' || path[0] != '/') return false;
    pattern.remove_prefix(1);
    path.remove_prefix(1);
    const std::size_t p_end = std::min(pattern.find('/'), pattern.size());
    const std::size_t s_end = std::min(path.find('/'), path.size());
    const std::string_view want = pattern.substr(0, p_end);
    const std::string_view got = path.substr(0, s_end);
    if (want == "{}") {
      if (got.empty()) return false;
      out.emplace_back(got);
    } else if (want != got) {
      return false;
    }
    pattern.remove_prefix(p_end);
    path.remove_prefix(s_end);
  }
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      const int hi = i + 2 < text.size() ? hex_value(text[i + 1]) : -1;
      const int lo = i + 2 < text.size() ? hex_value(text[i + 2]) : -1;
      if (hi < 0 || lo < 0) throw Malformed("the request target has a bad percent escape");
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::optional<std::string> Request::parameter(std::string_view name) const {
  for (const auto& [key, value] : query) {
    if (key == name) return value;
  }
  return std::nullopt;
}

Response Response::json(unsigned status, const nlohmann::json& body) {
  Response r;
  r.status = status;
  // Strings reaching an answer were checked as UTF-8 on their way in, or are the server's own.
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

void parse_target(std::string_view target, Request& into) {
  if (target.empty() || target[0] != '/') throw Malformed("the request target must be a path");
  const std::size_t q = target.find('?');
  into.path = percent_decode(target.substr(0, q), false);
  into.query.clear();
  if (q == std::string_view::npos) return;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const std::size_t amp = std::min(rest.find('&'), rest.size());
    const std::string_view pair = rest.substr(0, amp);
    if (!pair.empty()) {
      const std::size_t eq = pair.find('=');
      into.query.emplace_back(
          percent_decode(pair.substr(0, eq), true),
          eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true));
    }
    rest.remove_prefix(std::min(amp + 1, rest.size()));
  }
}

const Route* find_route(std::string_view method, std::string_view path,
                        std::vector<std::string>& parameters) {
  const std::array families = {&kHealthRoutes, &kRunRoutes, &kClaimRoutes, &kStepRoutes,
                               &kTranscriptRoutes};
  for (const auto* family : families) {
    for (const auto& route : *family) {
      if (route.method == method && matches(route.pattern, path, parameters)) return &route;
    }
  }
  return nullptr;
}

nlohmann::json json_body(const Call& call) {
  if (call.request.content_type != "application/json") {
    throw UnsupportedMediaType("this route takes Content-Type: application/json",
                               {{"content_type", call.request.content_type.substr(0, 100)}});
  }
  return wire::parse_json(call.request.body);
}

RunId run_parameter(const Call& call, std::size_t i) {
  try {
    return RunId(canonical_uuid(call.parameters.at(i), "run_id"));
  } catch (const InvalidArgument&) {
    // A path that names no run could name nothing else either.
    throw NotFound("no run has this id: run ids are UUIDs", {{"field", "run_id"}});
  }
}

std::int64_t number_parameter(const Call& call, std::size_t i, std::string_view what) {
  const std::string& text = call.parameters.at(i);
  std::int64_t n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (error != std::errc() || end != text.data() + text.size() || n < 1) {
    throw NotFound("no " + std::string(what) + " has this number: they are numbered from 1",
                   {{"field", what}});
  }
  return n;
}

std::optional<std::int64_t> integer_parameter(const Call& call, std::string_view name,
                                              std::int64_t min, std::int64_t max) {
  const auto text = call.request.parameter(name);
  if (!text) return std::nullopt;
  std::int64_t value = 0;
  const char* end = text->data() + text->size();
  const auto [at, error] = std::from_chars(text->data(), end, value);
  if (text->empty() || error != std::errc() || at != end || value < min || value > max) {
    throw InvalidArgument(std::string(name) + ": expected an integer from " + std::to_string(min) +
                              " to " + std::to_string(max),
                          {{"field", name}});
  }
  return value;
}

void only_parameters(const Call& call, std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : call.request.query) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      check_key(key, "parameter");
      throw InvalidArgument("unknown query parameter " + key, {{"field", key}});
    }
  }
}

Generation generation_body(const Call& call) {
  run_parameter(call, 0);
  const auto json = json_body(call);
  wire::Object body(json);
  const Generation generation(body.int64("generation", 1));
  body.finish();
  return generation;
}

std::string key_field(wire::Object& body, std::string_view field) {
  std::string value = body.string(field);
  check_key(value, body.name_of(field));
  return value;
}

std::string check_request(std::string_view method, std::string_view target,
                          std::string_view content_type, std::string_view body) {
  Request request;
  request.method = std::string(method);
  parse_target(target, request);
  request.content_type = std::string(content_type);
  request.body = std::string(body);
  std::vector<std::string> parameters;
  const Route* route = find_route(request.method, request.path, parameters);
  if (!route) throw NotFound("no such route");
  if (body.size() > route->body_limit) throw TooLarge("body too large");
  route->check(Call{request, std::move(parameters), std::nullopt});
  return std::string(route->name);
}

}  // namespace runledger::server
