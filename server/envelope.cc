#include "server/envelope.h"

#include <spdlog/spdlog.h>

namespace runledger::server {

unsigned status_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::malformed:
      return 400;
    case ErrorCode::unauthenticated:
      return 401;
    case ErrorCode::forbidden:
      return 403;
    case ErrorCode::not_found:
      return 404;
    case ErrorCode::conflict:
    case ErrorCode::fenced:
    case ErrorCode::thread_busy:
    case ErrorCode::superseded:
    case ErrorCode::budget_exhausted:
      return 409;
    case ErrorCode::too_large:
      return 413;
    case ErrorCode::unsupported_media_type:
      return 415;
    case ErrorCode::invalid_argument:
      return 422;
    case ErrorCode::unavailable:
      return 503;
    // Workflow outcomes never reach the bot routes; if one does, it is the server's bug.
    case ErrorCode::step_failed:
    case ErrorCode::nondeterministic:
      return 500;
  }
  return 500;
}

Response error_response(const Error& error, const std::string& request_id) {
  const unsigned status = status_of(error.code());
  const bool retryable = error.code() == ErrorCode::unavailable;
  Response response = Response::json(status, {{"code", to_string(error.code())},
                                              {"message", error.what()},
                                              {"details", error.details()},
                                              {"request_id", request_id},
                                              {"retryable", retryable}});
  if (retryable) response.headers.emplace_back("Retry-After", "1");
  if (error.code() == ErrorCode::unauthenticated) {
    response.headers.emplace_back("WWW-Authenticate", "Bearer");
  }
  return response;
}

Response current_error_response(const std::string& request_id) {
  try {
    throw;
  } catch (const Error& e) {
    return error_response(e, request_id);
  } catch (const std::exception& e) {
    // The log keeps what happened; the answer says nothing but where to look.
    spdlog::error("request {}: internal error: {}", request_id, e.what());
  } catch (...) {
    spdlog::error("request {}: internal error", request_id);
  }
  return Response::json(
      500, {{"code", "internal"},
            {"message", "internal error; see the server's log for request " + request_id},
            {"details", nlohmann::json::object()},
            {"request_id", request_id},
            {"retryable", false}});
}

}  // namespace runledger::server
