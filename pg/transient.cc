// The one place where libpqxx's exceptions are sorted into transient failures (Unavailable) and
// everything else. libpqxx 6.4 raises them in several shapes: a FATAL that closes the session
// (57P01, 25P03) arrives as broken_connection without its SQLSTATE; 53300 as
// too_many_connections, a broken_connection; 40001/40P01/40003 as transaction_rollback
// subclasses, which are not sql_errors and carry no SQLSTATE; the rest as sql_error with one.
#include <algorithm>
#include <random>
#include <string_view>
#include <thread>

#include "pg/pg.h"

namespace runledger::pg {
namespace {

// The first line of a libpqxx message: the server's sentence, without DETAIL, CONTEXT or the
// statement text.
std::string first_line(std::string_view what) {
  const auto end = what.find('\n');
  return std::string(what.substr(0, std::min(end, std::size_t{200})));
}

// The cause of an SQL error with this SQLSTATE when it is transient; empty when it is not.
std::string_view transient_cause(std::string_view state) {
  if (state.starts_with("08")) return "connection_lost";
  if (state == "53300") return "too_many_connections";
  if (state.starts_with("53")) return "insufficient_resources";
  if (state == "57P01" || state == "57P02") return "server_shutdown";
  if (state == "57P03") return "cannot_connect_now";
  if (state == "57014") return "statement_timeout";
  if (state == "55P03") return "lock_timeout";
  if (state == "40P01") return "deadlock";
  if (state == "40001") return "serialization_failure";
  if (state.starts_with("40")) return "transaction_rollback";
  if (state == "25P03") return "idle_in_transaction_timeout";
  return {};
}

Unavailable unavailable(std::string_view cause, const std::exception& error, bool unknown,
                        std::string_view sqlstate = {}) {
  nlohmann::json details = {{"cause", cause}, {"outcome_unknown", unknown}};
  if (!sqlstate.empty()) details["sqlstate"] = sqlstate;
  return Unavailable(
      "database unavailable (" + std::string(cause) + "): " + first_line(error.what()),
      std::move(details), unknown);
}

}  // namespace

std::optional<Unavailable> classify(const std::exception& error, Phase phase) {
  // A write whose session was lost may or may not have committed.
  const bool lost_unknown = phase == Phase::autocommit || phase == Phase::commit;
  if (dynamic_cast<const pqxx::in_doubt_error*>(&error)) {
    return unavailable("commit_in_doubt", error, true);
  }
  if (dynamic_cast<const pqxx::statement_completion_unknown*>(&error)) {
    return unavailable("statement_completion_unknown", error, true, "40003");
  }
  if (dynamic_cast<const pqxx::too_many_connections*>(&error)) {
    return unavailable("too_many_connections", error, false, "53300");
  }
  if (dynamic_cast<const pqxx::broken_connection*>(&error)) {
    return unavailable("connection_lost", error, phase != Phase::connect && lost_unknown);
  }
  if (dynamic_cast<const pqxx::deadlock_detected*>(&error)) {
    return unavailable("deadlock", error, false, "40P01");
  }
  if (dynamic_cast<const pqxx::serialization_failure*>(&error)) {
    return unavailable("serialization_failure", error, false, "40001");
  }
  if (dynamic_cast<const pqxx::transaction_rollback*>(&error)) {
    return unavailable("transaction_rollback", error, false);
  }
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&error)) {
    // An error with an SQLSTATE was reported by a live server for a statement it did not
    // complete: nothing of it committed.
    const std::string_view cause = transient_cause(sql->sqlstate());
    if (!cause.empty()) return unavailable(cause, error, false, sql->sqlstate());
  }
  return std::nullopt;
}

void rethrow_classified(Phase phase) {
  try {
    throw;
  } catch (const Unavailable&) {
    throw;
  } catch (const std::exception& e) {
    if (auto transient = classify(e, phase)) throw *transient;
    throw;
  }
}

bool commits_by_itself(const pqxx::transaction_base& tx) {
  return dynamic_cast<const pqxx::nontransaction*>(&tx) != nullptr;
}

// BEGIN is a statement of its own: a connection lost there commits nothing.
Work::Work(pqxx::connection& conn) try : tx_(conn) {
} catch (const pqxx::failure&) {
  rethrow_classified(Phase::statement);
}

void Work::commit() {
  try {
    tx_.commit();
  } catch (const pqxx::failure&) {
    rethrow_classified(Phase::commit);
  }
}

std::chrono::milliseconds Backoff::delay(int n) const {
  const int doublings = std::clamp(n - 1, 0, 30);
  const auto ceiling = std::min<std::int64_t>(most.count(), first.count() << doublings);
  thread_local std::minstd_rand random(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  return std::chrono::milliseconds(static_cast<std::int64_t>(ceiling * jitter(random)));
}

void sleep_for_backoff(std::chrono::milliseconds wait, const std::function<bool()>& keep_trying) {
  const auto until = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < until) {
    if (keep_trying && !keep_trying()) return;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        until - std::chrono::steady_clock::now(), std::chrono::milliseconds(50)));
  }
}

}  // namespace runledger::pg
