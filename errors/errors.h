// runledger expected outcomes.
//
// Contract: every outcome a caller is expected to handle (bad input, not found, conflict,
// fenced, budget exhausted, unavailable; a workflow step's final error, non-determinism; at the
// HTTP edge, a request that cannot be parsed, authenticated or allowed) is thrown
// as a subclass of runledger::Error carrying an ErrorCode. Code that maps outcomes to other
// representations (the HTTP envelope, CLI exit codes) switches on code() in exactly one place.
// Transient database failures arrive as Unavailable (pg/ turns libpqxx's exceptions into it);
// anything else thrown (a pqxx::sql_error from a bug, std::bad_alloc, ...) is unexpected and is
// treated as an internal error by such mappers.
//
// details() is structured JSON for machines (e.g. the live run a Conflict names); what()
// is one human sentence. Neither ever carries secrets or whole payloads.
//
// Thread-safety: immutable values.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace runledger {

enum class ErrorCode {
  invalid_argument,  // the input is malformed; retrying the same input cannot succeed
  not_found,         // the named entity does not exist (or no longer exists)
  conflict,          // the request contradicts the recorded state (details say how)
  fenced,            // the writer's generation is no longer the owner: a hard stop
  budget_exhausted,  // the run's declared budget refuses further work
  unavailable,       // a dependency (the database) could not be reached in time; retryable
  step_failed,       // a workflow step ended in its final error (details: step, kind)
  nondeterministic,  // workflow code no longer matches the steps its instance recorded
  thread_busy,       // a Conflict: the thread already has a live run (details: live_run_id)
  superseded,        // a Conflict: a newer incarnation of the slot took its place, for good
  // The HTTP edge (server/):
  malformed,               // the request is not what its content type says (bad JSON, ...)
  unauthenticated,         // no credential, or one that is not (or no longer) valid
  forbidden,               // the credential's scope or slots do not cover the request
  too_large,               // the request is larger than its route accepts
  unsupported_media_type,  // the request's content type is not one its route accepts
};

std::string_view to_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message,
        nlohmann::json details = nlohmann::json::object())
      : std::runtime_error(message), code_(code), details_(std::move(details)) {}
  ErrorCode code() const { return code_; }
  const nlohmann::json& details() const { return details_; }

 private:
  ErrorCode code_;
  nlohmann::json details_;
};

class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& message,
                           nlohmann::json details = nlohmann::json::object())
      : Error(ErrorCode::invalid_argument, message, std::move(details)) {}
};

class NotFound : public Error {
 public:
  explicit NotFound(const std::string& message, nlohmann::json details = nlohmann::json::object())
      : Error(ErrorCode::not_found, message, std::move(details)) {}
};

class Conflict : public Error {
 public:
  explicit Conflict(const std::string& message, nlohmann::json details = nlohmann::json::object())
      : Error(ErrorCode::conflict, message, std::move(details)) {}

 protected:
  Conflict(ErrorCode code, const std::string& message, nlohmann::json details)
      : Error(code, message, std::move(details)) {}
};

// A dispatch into a thread that has a live (queued or running) run; details name it.
class ThreadBusy : public Conflict {
 public:
  ThreadBusy(const std::string& message, nlohmann::json details)
      : Conflict(ErrorCode::thread_busy, message, std::move(details)) {}
};

// An HTTP slot's incarnation that a newer one replaced: it may never claim or heartbeat again.
class Superseded : public Conflict {
 public:
  Superseded(const std::string& message, nlohmann::json details)
      : Conflict(ErrorCode::superseded, message, std::move(details)) {}
};

// A write named a generation that no longer owns the run. The writer must stop driving the run
// at once: another process owns it now (or it ended).
class FencedError : public Error {
 public:
  explicit FencedError(const std::string& message,
                       nlohmann::json details = nlohmann::json::object())
      : Error(ErrorCode::fenced, message, std::move(details)) {}
};

class BudgetExhausted : public Error {
 public:
  explicit BudgetExhausted(const std::string& message,
                           nlohmann::json details = nlohmann::json::object())
      : Error(ErrorCode::budget_exhausted, message, std::move(details)) {}
};

// A dependency (the database) failed in a way that says nothing about the request: a lost or
// refused connection, a shutdown, a lock or statement timeout, a deadlock, a serialization
// failure. Retryable; never a run's or a workflow's outcome. pg/ classifies these, once.
//
// outcome_unknown(): the failure came while a write was committing (a connection lost during an
// autocommit statement or a COMMIT), so it may have landed. Resolve by repeating the write (every
// runledger write is safe to repeat) or by reading what was recorded, never by guessing.
class Unavailable : public Error {
 public:
  explicit Unavailable(const std::string& message,
                       nlohmann::json details = nlohmann::json::object(),
                       bool outcome_unknown = false)
      : Error(ErrorCode::unavailable, message, std::move(details)),
        outcome_unknown_(outcome_unknown) {}
  bool outcome_unknown() const { return outcome_unknown_; }

 private:
  bool outcome_unknown_;
};

// The HTTP edge's own outcomes (server/ throws them, and maps them with the rest).
class Malformed : public Error {
 public:
  explicit Malformed(const std::string& message, nlohmann::json details = nlohmann::json::object())
      : Error(ErrorCode::malformed, message, std::move(details)) {}
};

class Unauthenticated : public Error {
 public:
  explicit Unauthenticated(const std::string& message)
      : Error(ErrorCode::unauthenticated, message) {}
};

class Forbidden : public Error {
 public:
  explicit Forbidden(const std::string& message, nlohmann::json details = nlohmann::json::object())
      : Error(ErrorCode::forbidden, message, std::move(details)) {}
};

class TooLarge : public Error {
 public:
  explicit TooLarge(const std::string& message, nlohmann::json details = nlohmann::json::object())
      : Error(ErrorCode::too_large, message, std::move(details)) {}
};

class UnsupportedMediaType : public Error {
 public:
  explicit UnsupportedMediaType(const std::string& message,
                                nlohmann::json details = nlohmann::json::object())
      : Error(ErrorCode::unsupported_media_type, message, std::move(details)) {}
};

}  // namespace runledger
