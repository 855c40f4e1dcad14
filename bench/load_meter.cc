// What the server and the machine did during a measurement: transactions, WAL, CPU of the
// server's processes, ours and the machine's, and the other sessions' wait events.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "bench/bench_support.h"

namespace runledger::bench {
namespace {

// CPU time of all CPUs spent busy (not idle, not waiting for I/O), in seconds, from the first
// line of /proc/stat (user nice system idle iowait irq softirq steal ...).
double machine_busy_seconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  std::int64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
               steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) ||
      cpu != "cpu") {
    return 0;
  }
  return static_cast<double>(user + nice + system + irq + softirq + steal) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct ProcStat {
  int ppid;
  double cpu_s;           // utime + stime
  double children_cpu_s;  // cutime + cstime: the children it waited for
};

std::optional<ProcStat> read_proc_stat(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return std::nullopt;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses; it ends at the last ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 1));
  std::string state;
  long long ppid = 0, skip = 0, utime = 0, stime = 0, cutime = 0, cstime = 0;
  fields >> state >> ppid;
  for (int i = 0; i < 9; ++i) fields >> skip;  // pgrp .. cmajflt
  if (!(fields >> utime >> stime >> cutime >> cstime)) return std::nullopt;
  const auto tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  return ProcStat{static_cast<int>(ppid), static_cast<double>(utime + stime) / tick,
                  static_cast<double>(cutime + cstime) / tick};
}

// The postmaster, its live children, and the children it has already reaped.
double process_tree_cpu_seconds(int postmaster) {
  const auto root = read_proc_stat(postmaster);
  if (!root) return -1;
  double total = root->cpu_s + root->children_cpu_s;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c)) != 0;
        })) {
      continue;
    }
    const auto child = read_proc_stat(std::stoi(name));
    if (child && child->ppid == postmaster) total += child->cpu_s + child->children_cpu_s;
  }
  return total;
}

double seconds_of(const timeval& t) {
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
}

// This process and the children it waited for (pgbench).
double own_cpu_seconds() {
  rusage self{};
  rusage children{};
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &children);
  return seconds_of(self.ru_utime) + seconds_of(self.ru_stime) + seconds_of(children.ru_utime) +
         seconds_of(children.ru_stime);
}

}  // namespace

LoadMeter::LoadMeter(ScratchDatabase& db, const Server& server) : db_(db) {
  // Our session's backend is a child of the postmaster; only meaningful when the server runs on
  // this machine, which it does when we started it.
  if (server.cluster) {
    const int backend = db.exec("SELECT pg_backend_pid()")[0][0].as<int>();
    if (const auto stat = read_proc_stat(backend)) postmaster_pid_ = stat->ppid;
  }
  before_ = snapshot();
  const int own_backend = db.exec("SELECT pg_backend_pid()")[0][0].as<int>();
  sampler_ = std::jthread(
      [this, own_backend](const std::stop_token& stop) { sample_waits(stop, own_backend); });
}

void LoadMeter::sample_waits(const std::stop_token& stop, int exclude_pid) {
  try {
    pqxx::connection conn(db_.url());
    conn.prepare("bench_waits", R"sql(
      SELECT CASE WHEN state = 'idle' THEN 'idle' ELSE coalesce(wait_event, 'CPU') END
      FROM pg_stat_activity
      WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND pid <> $1)sql");
    while (!stop.stop_requested()) {
      {
        pqxx::nontransaction tx(conn);
        for (const auto& row : tx.exec_prepared("bench_waits", exclude_pid)) {
          ++wait_samples_[row[0].as<std::string>()];
        }
      }
      std::this_thread::sleep_for(kWaitSampleInterval);
    }
  } catch (const std::exception& e) {
    spdlog::warn("sampling wait events failed: {}", e.what());
    sampling_failed_ = true;
  }
}

Load LoadMeter::finish() {
  sampler_.request_stop();
  sampler_.join();
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline &&
         db_.value("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                   "AND pid <> pg_backend_pid()") != "0") {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const Snapshot after = snapshot();
  Load load;
  load.seconds = std::chrono::duration<double>(after.at - before_.at).count();
  load.write_transactions = after.xids - before_.xids;
  load.wal_bytes = after.wal_bytes - before_.wal_bytes;
  if (after.wal_syncs >= 0 && before_.wal_syncs >= 0)
    load.wal_syncs = after.wal_syncs - before_.wal_syncs;
  if (load.seconds > 0) {
    if (after.server_cpu_s >= 0 && before_.server_cpu_s >= 0)
      load.server_cores = (after.server_cpu_s - before_.server_cpu_s) / load.seconds;
    load.client_cores = (after.client_cpu_s - before_.client_cpu_s) / load.seconds;
    load.machine_cores = (after.machine_busy_s - before_.machine_busy_s) / load.seconds;
  }
  std::int64_t samples = 0;
  for (const auto& [name, n] : wait_samples_) samples += n;
  if (!sampling_failed_ && samples > 0) {
    for (const auto& [name, n] : wait_samples_) {
      load.waits.emplace_back(name, static_cast<double>(n) / static_cast<double>(samples));
    }
    std::sort(load.waits.begin(), load.waits.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });
  }
  return load;
}

std::string format_waits(const std::vector<std::pair<std::string, double>>& waits, std::size_t n) {
  if (waits.empty()) return "n/a";
  std::string out;
  for (std::size_t i = 0; i < waits.size() && i < n; ++i) {
    if (!out.empty()) out += ", ";
    out +=
        waits[i].first + " " + std::to_string(static_cast<int>(waits[i].second * 100 + 0.5)) + "%";
  }
  return out;
}

LoadMeter::Snapshot LoadMeter::snapshot() {
  Snapshot s;
  const auto row = db_.exec(
      "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, "
      "pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")[0];
  s.xids = row[0].as<std::int64_t>();
  s.wal_bytes = row[1].as<std::int64_t>();
  try {
    s.wal_syncs = db_.exec("SELECT wal_sync FROM pg_stat_wal")[0][0].as<std::int64_t>();
  } catch (const pqxx::sql_error&) {
    s.wal_syncs = -1;  // before PostgreSQL 14
  }
  if (postmaster_pid_) s.server_cpu_s = process_tree_cpu_seconds(*postmaster_pid_);
  s.client_cpu_s = own_cpu_seconds();
  s.machine_busy_s = machine_busy_seconds();
  s.at = Clock::now();
  return s;
}

}  // namespace runledger::bench
