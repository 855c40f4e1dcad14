#include "errors/errors.h"

namespace runledger {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument:
      return "invalid_argument";
    case ErrorCode::not_found:
      return "not_found";
    case ErrorCode::conflict:
      return "conflict";
    case ErrorCode::fenced:
      return "fenced";
    case ErrorCode::budget_exhausted:
      return "budget_exhausted";
    case ErrorCode::unavailable:
      return "unavailable";
    case ErrorCode::step_failed:
      return "step_failed";
    case ErrorCode::nondeterministic:
      return "nondeterministic";
    case ErrorCode::thread_busy:
      return "thread_busy";
    case ErrorCode::superseded:
      return "superseded";
    case ErrorCode::malformed:
      return "malformed";
    case ErrorCode::unauthenticated:
      return "unauthenticated";
    case ErrorCode::forbidden:
      return "forbidden";
    case ErrorCode::too_large:
      return "too_large";
    case ErrorCode::unsupported_media_type:
      return "unsupported_media_type";
  }
  return "unknown";
}

}  // namespace runledger
