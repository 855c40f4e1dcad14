// PostgreSQL access shared by every runledger module: named statements and a connection pool.
//
// Contract:
//  - SQL is never assembled from values. Each module keeps its queries as `Statement`s in one
//    file and runs them with exec(), which prepares the statement on the connection on first use
//    (libpqxx 6.4 prepares lazily and re-prepares after its silent reconnects).
//  - Session settings (timeouts) travel in the connection string, never as `SET`: libpqxx 6.4
//    reconnects silently after a dropped session and a `SET` would be gone without notice.
//  - Pool hands each connection to one thread at a time; acquire() waits at most
//    Options::acquire_timeout and then throws Unavailable. A connection found broken on return
//    is dropped and replaced on demand.
//
// Thread-safety: Pool is thread-safe; a Pool::Lease and its connection belong to one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <pqxx/pqxx>

namespace runledger::pg {

// A named SQL statement with $n placeholders.
struct Statement {
  const char* name;
  const char* sql;
};

template <class... Args>
pqxx::result exec(pqxx::transaction_base& tx, const Statement& s, Args&&... args) {
  tx.conn().prepare(s.name, s.sql);  // registers once; a no-op when already known
  return tx.exec_prepared(s.name, std::forward<Args>(args)...);
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

// `url` (a postgresql:// URI or a key=value string) with `settings` added as libpq `options`.
std::string with_settings(std::string_view url, const std::vector<Setting>& settings);

// Milliseconds as a PostgreSQL duration literal ("1500ms").
std::string duration_setting(std::chrono::milliseconds ms);

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
