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
  }
  return "unknown";
}

}  // namespace runledger
