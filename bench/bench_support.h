// What the benches share: the server they run against (a throwaway durable embedded cluster, or
// DATABASE_URL; scratch_server.cc), pgbench as the reference on that server (pgbench.cc), timed
// client loops with latency percentiles and a Ctrl-C that stops measuring and unwinds, stopping
// the cluster (measurement.cc), and what the server and the machine did meanwhile (LoadMeter,
// load_meter.cc). Private to bench/.
//
// Thread-safety: measure() runs one thread per client and LoadMeter one sampling thread, each on
// connections of their own; everything else is for the main thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <pqxx/pqxx>

#include "cluster/cluster.h"
#include "pg/pg.h"

namespace runledger::bench {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Interruption (measurement.cc): SIGINT/SIGTERM set a flag; measurements stop early and
// check_interrupted() throws, so that main unwinds and stops the cluster (a Ctrl-C must not leave a
// postmaster behind in /tmp).

void install_signal_handlers();
void check_interrupted();  // throws std::runtime_error("interrupted") once interrupted

// ---------------------------------------------------------------------------------------------
// Command line (measurement.cc): [--seconds N], N seconds per measurement (default 5).

struct Args {
  int seconds = 5;
};

Args parse_args(int argc, char** argv, std::string_view program);

// ---------------------------------------------------------------------------------------------
// Connection URLs (pgbench.cc)

// The parts of a postgresql:// URI that pgbench takes as separate arguments. Query parameters
// (sslmode, ...) are not kept: the benches target a local server.
struct ConnInfo {
  std::string user;
  std::string password;
  std::string host;
  std::string port;
  std::string database;
};

ConnInfo parse_url(std::string_view url);
// user@host:port/database, for messages.
std::string url_without_password(std::string_view url);

// ---------------------------------------------------------------------------------------------
// The server (scratch_server.cc)

struct Server {
  std::optional<cluster::EmbeddedCluster> cluster;  // engaged unless DATABASE_URL is set
  std::string url;
  std::string description;
};

// DATABASE_URL when set (a scratch database: the benches write to it), else a fresh durable
// embedded cluster under /tmp (fsync, synchronous_commit and full_page_writes on, as for
// pgbench: the ratios compare like with like) with database `database`, removed when `server`
// goes.
void open_server(Server& server, std::string_view database);

// A connection for the bench's own setup statements, which run outside the modules' APIs.
class ScratchDatabase {
 public:
  explicit ScratchDatabase(std::string url);

  const std::string& url() const { return url_; }
  pqxx::connection& conn() { return conn_; }

  pqxx::result exec(const std::string& query);
  // The first column of the first row.
  std::string value(const std::string& query);
  void create_database(std::string_view name);
  // Before each measurement, ours and pgbench's alike: each then starts right after a
  // checkpoint, paying the same full-page writes, instead of whoever runs into one paying it.
  // Needs superuser or pg_checkpoint; without either it warns once and does nothing.
  void checkpoint();

  // The report's first lines: the server's version, where it runs and its durability settings.
  std::vector<std::string> server_lines(const Server& server);

 private:
  std::string url_;
  pqxx::connection conn_;
  bool warned_checkpoint_ = false;
};

// ---------------------------------------------------------------------------------------------
// The load meter (load_meter.cc)

// What the server and the machine did during a measurement: started before it, finished after.
struct Load {
  double seconds = 0;                   // from start to finish
  std::int64_t write_transactions = 0;  // transaction ids assigned (one per write transaction)
  std::int64_t wal_bytes = 0;           // WAL inserted
  std::int64_t wal_syncs = -1;          // WAL fsyncs (pg_stat_wal.wal_sync); -1: unknown
  // CPU time per second of wall time (1.0 = one core busy):
  double server_cores = -1;  // the embedded cluster's processes; -1: unknown (DATABASE_URL)
  double client_cores = 0;   // this process and the children it waited for (pgbench)
  double machine_cores = 0;  // every process on the machine, from /proc/stat
  // What the other client sessions were doing, sampled every kWaitSampleInterval: each state's
  // share of all samples, largest first. "CPU": running a statement and waiting for nothing;
  // "idle": waiting for its client's next statement; else the wait_event (WALWrite, WALSync,
  // ...). Empty when sampling failed.
  std::vector<std::pair<std::string, double>> waits;
};

inline constexpr std::chrono::milliseconds kWaitSampleInterval{20};

// The largest `n` shares of `waits` as "WALWrite 61%, CPU 12%, ...".
std::string format_waits(const std::vector<std::pair<std::string, double>>& waits, std::size_t n);

class LoadMeter {
 public:
  // Reads the counters now and starts sampling waits on a connection of its own. `server` tells
  // whose processes are the server's.
  LoadMeter(ScratchDatabase& db, const Server& server);
  // Stops sampling, waits (at most 5 s) for every other client session to end, so that their
  // WAL statistics reach pg_stat_wal and their CPU time their parent's, then reads the counters
  // again. Close the measurement's connections first.
  Load finish();

 private:
  struct Snapshot {
    Clock::time_point at;
    std::int64_t xids = 0;
    std::int64_t wal_bytes = 0;
    std::int64_t wal_syncs = -1;
    double server_cpu_s = -1;
    double client_cpu_s = 0;
    double machine_busy_s = 0;
  };
  Snapshot snapshot();
  void sample_waits(const std::stop_token& stop, int exclude_pid);

  ScratchDatabase& db_;
  std::optional<int> postmaster_pid_;
  Snapshot before_;
  // Written by the sampler thread only; read after it is joined.
  std::map<std::string, std::int64_t> wait_samples_;
  bool sampling_failed_ = false;
  std::jthread sampler_;  // last: joined before the members it writes go
};

// ---------------------------------------------------------------------------------------------
// pgbench (pgbench.cc)

class Pgbench {
 public:
  Pgbench(std::filesystem::path bin_dir, ConnInfo target);

  // pgbench's tables at scale 1 (100k accounts), replacing any from an earlier run.
  void initialize() const;
  // The simple-update transaction (-N: UPDATE accounts, SELECT, INSERT history; no contended
  // tellers/branches updates), one thread per client, no vacuum before it (-n).
  double simple_update_tps(int clients, int seconds) const;
  // The transaction in `script_file` (-f), one thread per client, no vacuum before it (-n).
  double script_tps(const std::filesystem::path& script_file, int clients, int seconds) const;
  // The same with more pgbench options (e.g. {"-M", "prepared", "-D", "name=value"}).
  double script_tps(const std::filesystem::path& script_file, int clients, int seconds,
                    const std::vector<std::string>& options) const;
  // The mean latency in ms of the first statement of `script_file`, 1 client (-r).
  double first_statement_ms(const std::filesystem::path& script_file, int seconds) const;

 private:
  std::string run(const std::vector<std::string>& options) const;

  std::string program_;
  ConnInfo target_;
};

// A file under /tmp holding `content`, removed when this goes.
class TempFile {
 public:
  TempFile(std::string_view name_prefix, std::string_view suffix, std::string_view content);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// ---------------------------------------------------------------------------------------------
// Timed client loops (measurement.cc)

// Untimed operations per client before the clock starts: they prepare the statements on each
// connection, as pgbench's first transactions do, and are not what a steady state costs.
inline constexpr int kWarmupOps = 5;

// One client's operation, performed once: returns how many operations it completed, 0 only when
// there was nothing left to do (the client then stops and the measurement says it ran dry).
using Operation = std::function<int()>;

struct Measurement {
  double ops_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  std::int64_t ops = 0;
  bool ran_dry = false;
};

// Runs ops[i] on client thread i: kWarmupOps untimed, then all clients at once for `seconds`.
// Rethrows the first client's error.
Measurement measure(const std::vector<Operation>& ops, int seconds);

// The value at `fraction` (0..1) of `sorted`; 0 when empty.
double percentile(const std::vector<double>& sorted, double fraction);

// Opens every connection of the pool before the clock starts: pgbench's tps leaves out
// connecting too.
void open_all(pg::Pool& pool);

}  // namespace runledger::bench
