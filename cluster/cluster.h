// The embedded PostgreSQL cluster: a private server started from the installed PostgreSQL 15+.
//
// Contract:
//  - start() brings up a cluster rooted at Options::root (created if absent): `initdb` on first
//    use, then `pg_ctl start` listening on 127.0.0.1 only (no unix socket outside the root), with
//    password authentication. The password is generated once and kept in <root>/password (0600).
//  - Exactly one process owns a root at a time: start() takes an exclusive flock on
//    <root>/owner.lock and throws Conflict naming the holder's pid if another live process has it.
//    The lock dies with its holder, so after a `kill -9` of the owner the next start() gets it.
//  - A postmaster left running by a killed owner is stopped (`pg_ctl stop -m fast`) and started
//    again, never adopted: the new owner then knows the configuration and the port it runs with.
//  - Running as root, every PostgreSQL binary runs as the `postgres` OS user, with its working
//    directory set to the root, so the root must be reachable by that user (the default for root
//    is under /var/lib/runledger, never under /root).
//  - stop() is a fast shutdown; the destructor calls it if this object started the server.
//
// Thread-safety: not thread-safe; one owner thread.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace runledger::cluster {

struct Options {
  // Directory the cluster lives in (pgdata/, password, owner.lock, server.log).
  // Empty: default_root() for the current working directory.
  std::filesystem::path root;
  // TCP port on 127.0.0.1. 0: a free port is picked at each start.
  int port = 0;
  // Sized for many bot processes, each with a small pool.
  int max_connections = 400;
  // false for throwaway clusters (tests): fsync, synchronous_commit and full_page_writes off.
  bool durable = true;
  // Database created (if missing) after start; url() points at it.
  std::string database = "runledger";
  // How long pg_ctl may take to start or stop the server.
  std::chrono::seconds timeout{60};
  // Delete the whole root in stop() (throwaway clusters).
  bool remove_on_stop = false;
};

// A root for `dir` that the postgres user can reach: <dir>/.runledger/pg for a normal user,
// /var/lib/runledger/<hash of dir> for root.
std::filesystem::path default_root(const std::filesystem::path& dir);

// The bin directory of the newest installed PostgreSQL >= 15 (initdb, pg_ctl, pgbench).
// Throws std::runtime_error naming what was searched when there is none.
std::filesystem::path find_bin_dir();

class EmbeddedCluster {
 public:
  explicit EmbeddedCluster(Options options);
  ~EmbeddedCluster();
  EmbeddedCluster(const EmbeddedCluster&) = delete;
  EmbeddedCluster& operator=(const EmbeddedCluster&) = delete;

  void start();
  void stop();
  bool running() const;

  // postgresql://<user>:<password>@127.0.0.1:<port>/<database>
  std::string url() const;
  std::string url(std::string_view database) const;
  int port() const;
  const std::filesystem::path& root() const;
  std::filesystem::path bin_dir() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace runledger::cluster
