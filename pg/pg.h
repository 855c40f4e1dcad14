// PostgreSQL access shared by every runledger module: named statements, transient failures
// classified once, and a connection pool.
//
// Contract:
//  - SQL is never assembled from values. Each module keeps its queries as `Statement`s in one
//    file and runs them with exec(), which prepares the statement on the connection on first use
//    (libpqxx 6.4 prepares lazily and re-prepares after its silent reconnects).
//  - Transient failures are classified here and nowhere else: whatever libpqxx 6.4 raises for a
//    lost or refused connection, a shutdown (57P01/57P02/57P03), too many connections (53300) or
//    other insufficient resources (53xxx), a lock timeout (55P03), a deadlock (40P01), a
//    serialization failure (40001), a statement timeout or cancel (57014) or an idle-in-
//    transaction timeout (25P03) leaves exec(), Work and Pool::acquire() as runledger::Unavailable,
//    with outcome_unknown() set when a connection was lost while a write could have committed (an
//    autocommit statement, or COMMIT). Any other SQL error (a constraint, a syntax error) passes
//    through as libpqxx raised it: it is the caller's or a bug, and retrying cannot help.
//  - Session settings (timeouts) travel in the connection string, never as `SET`: libpqxx 6.4
//    reconnects silently after a dropped session and a `SET` would be gone without notice.
//  - Pool hands each connection to one thread at a time; acquire() waits at most
//    Options::acquire_timeout and then throws Unavailable. A connection found broken on return
//    is dropped and replaced on demand.
//
// Thread-safety: Pool is thread-safe; a Pool::Lease and its connection belong to one thread.
// classify() and Backoff are pure.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <pqxx/pqxx>

#include "errors/errors.h"

namespace runledger::pg {

// Where a libpqxx exception was raised; decides whether a lost connection leaves a commit's
// outcome unknown.
enum class Phase {
  connect,     // opening a connection: nothing was sent
  statement,   // a statement inside an explicit transaction: a lost connection rolls it back
  autocommit,  // a statement that commits by itself (pqxx::nontransaction)
  commit,      // COMMIT of an explicit transaction
};

// The Unavailable that stands for `error` (an exception libpqxx raised in `phase`) when it is a
// transient failure (see the contract above); nullopt when it is not.
std::optional<Unavailable> classify(const std::exception& error, Phase phase);

// Inside a catch block: rethrows the exception being handled, as Unavailable when classify()
// says it is transient, else unchanged.
[[noreturn]] void rethrow_classified(Phase phase);

// A named SQL statement with $n placeholders.
struct Statement {
  const char* name;
  const char* sql;
};

// Whether each statement of `tx` commits by itself (a pqxx::nontransaction).
bool commits_by_itself(const pqxx::transaction_base& tx);

template <class... Args>
pqxx::result exec(pqxx::transaction_base& tx, const Statement& s, Args&&... args) {
  try {
    tx.conn().prepare(s.name, s.sql);  // registers once; a no-op when already known
    return tx.exec_prepared(s.name, std::forward<Args>(args)...);
  } catch (const pqxx::failure&) {
    rethrow_classified(commits_by_itself(tx) ? Phase::autocommit : Phase::statement);
  }
}

// An explicit READ COMMITTED transaction whose BEGIN and COMMIT classify their failures (a
// connection lost during COMMIT: Unavailable with outcome_unknown()). Statements run on it as on
// the pqxx::work it holds (it converts to one).
class Work {
 public:
  explicit Work(pqxx::connection& conn);
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  operator pqxx::work&() { return tx_; }
  void commit();

 private:
  pqxx::work tx_;
};

// Bounded, jittered exponential backoff between tries of work that met Unavailable.
struct Backoff {
  // The wait after the first failed try, before jitter.
  std::chrono::milliseconds first{50};
  // No wait is longer than this.
  std::chrono::milliseconds most{2'000};
  // Calls in all, the first included.
  int tries = 8;
  // The wait after failed try `n` (1-based): min(most, first * 2^(n-1)) times a random factor in
  // [0.5, 1], so that processes failing together do not retry together.
  std::chrono::milliseconds delay(int n) const;
};

// Sleeps `wait`, waking every 50 ms to ask keep_trying (if given); returns early when it says
// false.
void sleep_for_backoff(std::chrono::milliseconds wait, const std::function<bool()>& keep_trying);

// Calls fn() until it returns without throwing Unavailable, at most backoff.tries times, waiting
// backoff.delay() between tries; stops early when keep_trying (if given) says false. Rethrows the
// last Unavailable. fn must be safe to repeat (every runledger write is, with the same
// arguments).
template <class F>
auto retry_unavailable(const Backoff& backoff, F&& fn,
                       const std::function<bool()>& keep_trying = nullptr) -> decltype(fn()) {
  for (int n = 1;; ++n) {
    try {
      return fn();
    } catch (const Unavailable&) {
      if (n >= backoff.tries || (keep_trying && !keep_trying())) throw;
    }
    sleep_for_backoff(backoff.delay(n), keep_trying);
  }
}

// libpqxx 6.4 has no std::optional parameters; a null `const char*` is sent as SQL NULL.
inline const char* nullable(const std::optional<std::string>& value) {
  return value ? value->c_str() : nullptr;
}

// A PostgreSQL run-time parameter set for every session through the connection string.
struct Setting {
  std::string name;
  std::string value;
};

// `text` as one component of a postgresql:// URI (a password, a database name, a query value):
// every byte but the unreserved ASCII letters, digits and `-._~` becomes %XX (RFC 3986).
std::string percent_encode(std::string_view text);

// `url` (a postgresql:// URI or a key=value string) with `settings` added as libpq `options`.
std::string with_settings(std::string_view url, const std::vector<Setting>& settings);

// Milliseconds as a PostgreSQL duration literal ("1500ms").
std::string duration_setting(std::chrono::milliseconds ms);

// "{a,b,c}": a PostgreSQL array literal of values that need no quoting (UUIDs, integers), one
// statement parameter however many there are; `text` turns an item into its literal.
template <class T, class F>
std::string array_literal(const std::vector<T>& items, F&& text) {
  std::string out = "{";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    out += text(items[i]);
  }
  return out + "}";
}

class Pool {
 public:
  struct Options {
    std::string url;
    // Connections opened at most; more acquirers wait.
    int size = 8;
    // How long acquire() waits for a free connection before Unavailable.
    std::chrono::milliseconds acquire_timeout{10'000};
    // A statement waiting longer than this for a row lock fails instead of queueing forever
    // behind a process that was paused inside an open transaction.
    std::chrono::milliseconds lock_timeout{5'000};
    // The server ends a session that sits idle inside an open transaction this long, releasing
    // its row locks (a paused or wedged process must not block every reclaim).
    std::chrono::milliseconds idle_in_transaction_timeout{30'000};
    // More settings for every session of this pool (see with_settings). TimeZone is UTC.
    std::vector<Setting> settings;
  };

  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    pqxx::connection& operator*() const { return *conn_; }
    pqxx::connection* operator->() const { return conn_.get(); }

   private:
    friend class Pool;
    Lease(Pool* pool, std::unique_ptr<pqxx::connection> conn)
        : pool_(pool), conn_(std::move(conn)) {}
    Pool* pool_;
    std::unique_ptr<pqxx::connection> conn_;
  };

  explicit Pool(Options options);
  // A pool of `size` connections to `url` with every other option at its default.
  Pool(std::string url, int size);
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  Lease acquire();
  // One round trip on a pooled connection; Unavailable when the database cannot answer (what a
  // readiness check asks, at the cost of a `SELECT 1`).
  void ping();
  const std::string& url() const { return url_; }
  int size() const { return options_.size; }

 private:
  void give_back(std::unique_ptr<pqxx::connection> conn);

  Options options_;
  std::string url_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<pqxx::connection>> idle_;
  int open_ = 0;
};

}  // namespace runledger::pg
