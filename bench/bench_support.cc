#include "bench/bench_support.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <latch>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

extern char** environ;

namespace runledger::bench {
namespace {

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "used from a signal handler");

void on_signal(int) {
  g_interrupted = true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 &&
        hex_value(text[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

// Splits `text` at the first `separator`: (before, after), or (text, "") without one.
std::pair<std::string_view, std::string_view> split_first(std::string_view text, char separator) {
  const auto at = text.find(separator);
  if (at == std::string_view::npos) return {text, {}};
  return {text.substr(0, at), text.substr(at + 1)};
}

// ---------------------------------------------------------------------------------------------
// Child processes

struct ProcessResult {
  int exit_code;       // -1 when killed by a signal
  std::string output;  // stdout and stderr, interleaved
};

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Our environment plus `extra` (NAME=value entries replacing ours of the same name).
std::vector<std::string> environment_with(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view name = split_first(*entry, '=').first;
    const bool replaced = std::any_of(extra.begin(), extra.end(), [&](const std::string& e) {
      return split_first(e, '=').first == name;
    });
    if (!replaced) env.emplace_back(*entry);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::string read_all(int fd) {
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n > 0) {
      out.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0) {
      return out;
    } else if (errno != EINTR) {
      throw std::system_error(errno, std::generic_category(), "reading pgbench output");
    }
  }
}

// Runs argv[0] (an absolute path) with an explicit argv, no shell, and waits for it. Everything
// the child needs is built before fork(): only async-signal-safe calls may follow it.
ProcessResult run_process(std::vector<std::string> argv,
                          const std::vector<std::string>& extra_env) {
  std::vector<std::string> env = environment_with(extra_env);
  const std::vector<char*> c_argv = c_strings(argv);
  const std::vector<char*> c_env = c_strings(env);
  int output[2];
  if (pipe2(output, O_CLOEXEC) != 0)
    throw std::system_error(errno, std::generic_category(), "pipe");
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(output[0]);
    close(output[1]);
    throw std::system_error(error, std::generic_category(), "fork");
  }
  if (pid == 0) {
    if (dup2(output[1], STDOUT_FILENO) < 0 || dup2(output[1], STDERR_FILENO) < 0) _exit(127);
    execve(c_argv[0], c_argv.data(), c_env.data());
    _exit(127);
  }
  close(output[1]);
  std::string text;
  try {
    text = read_all(output[0]);
  } catch (...) {
    close(output[0]);
    throw;
  }
  close(output[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::system_error(errno, std::generic_category(), "waitpid");
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, std::move(text)};
}

// "tps = 1234.5 (without initial connection time)": pgbench's figure that, like ours, leaves
// out connecting.
double parse_tps(const std::string& output) {
  constexpr std::string_view kPrefix = "tps = ";
  constexpr std::string_view kSuffix = "(without initial connection time)";
  std::size_t start = 0;
  while (start < output.size()) {
    const std::size_t end = std::min(output.find('\n', start), output.size());
    const std::string line = output.substr(start, end - start);
    if (line.starts_with(kPrefix) && line.find(kSuffix) != std::string::npos) {
      return std::strtod(line.c_str() + kPrefix.size(), nullptr);
    }
    start = end + 1;
  }
  throw std::runtime_error("no tps line in pgbench's output:\n" + output);
}

std::string filesystem_note(const std::filesystem::path& path) {
  struct statfs fs {};
  constexpr long kTmpfsMagic = 0x01021994;
  if (statfs(path.c_str(), &fs) == 0 && fs.f_type == kTmpfsMagic) {
    return " (WARNING: on tmpfs, fsync costs nothing)";
  }
  return "";
}

// Root in a fresh directory under /tmp: a throwaway cluster never reuses another's files.
void start_embedded(Server& server, std::string_view database) {
  char root[] = "/tmp/runledger-bench-XXXXXX";
  if (mkdtemp(root) == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp");
  cluster::Options options;
  options.root = root;
  options.durable = true;
  options.remove_on_stop = true;
  options.database = std::string(database);
  spdlog::info("starting an embedded cluster in {}", root);
  server.cluster.emplace(options);
  server.cluster->start();
  server.url = server.cluster->url();
  server.description = std::string("embedded cluster in ") + root + filesystem_note(root);
}

// ---------------------------------------------------------------------------------------------
// Client threads

struct ClientResult {
  std::int64_t ops = 0;
  Clock::time_point start;
  Clock::time_point end;
  std::vector<double> latencies_us;
  bool ran_dry = false;
  std::exception_ptr error;
};

void timed_loop(const Operation& op, std::chrono::seconds duration, ClientResult& out) {
  out.latencies_us.reserve(1 << 16);
  out.start = Clock::now();
  const auto deadline = out.start + duration;
  while (!g_interrupted) {
    const auto before = Clock::now();
    if (before >= deadline) break;
    const int done = op();
    const auto after = Clock::now();
    if (done == 0) {
      out.ran_dry = true;
      break;
    }
    out.ops += done;
    out.latencies_us.push_back(std::chrono::duration<double, std::micro>(after - before).count());
  }
  out.end = Clock::now();
}

// Warms up, then waits for every other client so that all timed loops overlap. A client that
// fails still arrives at the latch: the others must not wait for it forever.
void run_client(const Operation& op, std::chrono::seconds duration, std::latch& ready,
                ClientResult& out) {
  try {
    for (int i = 0; i < kWarmupOps; ++i) op();
  } catch (...) {
    out.error = std::current_exception();
  }
  ready.arrive_and_wait();
  if (out.error) return;
  try {
    timed_loop(op, duration, out);
  } catch (...) {
    out.error = std::current_exception();
  }
}

Measurement summarize(std::vector<ClientResult>& results) {
  Clock::time_point start = Clock::time_point::max();
  Clock::time_point end = Clock::time_point::min();
  std::vector<double> latencies;
  Measurement m;
  for (auto& r : results) {
    if (r.error) std::rethrow_exception(r.error);
    m.ops += r.ops;
    start = std::min(start, r.start);
    end = std::max(end, r.end);
    latencies.insert(latencies.end(), r.latencies_us.begin(), r.latencies_us.end());
    m.ran_dry = m.ran_dry || r.ran_dry;
  }
  std::sort(latencies.begin(), latencies.end());
  m.ops_per_s = static_cast<double>(m.ops) / std::chrono::duration<double>(end - start).count();
  m.p50_us = percentile(latencies, 0.50);
  m.p99_us = percentile(latencies, 0.99);
  return m;
}

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

// ---------------------------------------------------------------------------------------------

void install_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void check_interrupted() {
  if (g_interrupted) throw std::runtime_error("interrupted");
}

Args parse_args(int argc, char** argv, std::string_view program) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--seconds" && i + 1 < argc) {
      char* end = nullptr;
      const long value = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || value < 1 || value > 3600) {
        throw std::invalid_argument("--seconds takes a whole number of seconds from 1 to 3600");
      }
      args.seconds = static_cast<int>(value);
    } else {
      throw std::invalid_argument("usage: " + std::string(program) + " [--seconds N]");
    }
  }
  return args;
}

ConnInfo parse_url(std::string_view url) {
  std::string_view rest = url;
  if (rest.starts_with("postgresql://")) {
    rest.remove_prefix(13);
  } else if (rest.starts_with("postgres://")) {
    rest.remove_prefix(11);
  } else {
    throw std::invalid_argument("not a postgresql:// URL (needed to run pgbench against it)");
  }
  rest = split_first(rest, '?').first;
  ConnInfo info;
  auto [authority, database] = split_first(rest, '/');
  info.database = percent_decode(database);
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    const auto [user, password] = split_first(authority.substr(0, at), ':');
    info.user = percent_decode(user);
    info.password = percent_decode(password);
    authority.remove_prefix(at + 1);
  }
  // An IPv6 host is bracketed: [::1]:5432.
  const auto colon = authority.rfind(':');
  const bool has_port =
      colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos;
  std::string_view host = has_port ? authority.substr(0, colon) : authority;
  if (has_port) info.port = std::string(authority.substr(colon + 1));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  info.host = percent_decode(host);
  return info;
}

std::string url_without_password(std::string_view url) {
  const ConnInfo info = parse_url(url);
  return info.user + "@" + info.host + ":" + info.port + "/" + info.database;
}

void open_server(Server& server, std::string_view database) {
  if (const char* url = std::getenv("DATABASE_URL"); url != nullptr && *url != '\0') {
    server.url = url;
    server.description = "DATABASE_URL";
  } else {
    start_embedded(server, database);
  }
}

// ---------------------------------------------------------------------------------------------

ScratchDatabase::ScratchDatabase(std::string url) : url_(std::move(url)), conn_(url_) {}

pqxx::result ScratchDatabase::exec(const std::string& query) {
  pqxx::nontransaction tx(conn_);
  return tx.exec(query);
}

std::string ScratchDatabase::value(const std::string& query) {
  return exec(query)[0][0].as<std::string>();
}

void ScratchDatabase::create_database(std::string_view name) {
  pqxx::nontransaction tx(conn_);
  if (tx.exec_params("SELECT 1 FROM pg_database WHERE datname = $1", std::string(name)).empty()) {
    tx.exec0("CREATE DATABASE " + conn_.quote_name(std::string(name)));
  }
}

void ScratchDatabase::checkpoint() {
  try {
    exec("CHECKPOINT");
  } catch (const pqxx::insufficient_privilege&) {
    if (!warned_checkpoint_) spdlog::warn("cannot CHECKPOINT (no privilege): skipping it");
    warned_checkpoint_ = true;
  }
}

std::vector<std::string> ScratchDatabase::server_lines(const Server& server) {
  return {value("SELECT version()"),
          "server: " + server.description + "; fsync=" + value("SHOW fsync") +
              ", synchronous_commit=" + value("SHOW synchronous_commit") +
              ", full_page_writes=" + value("SHOW full_page_writes")};
}

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

// ---------------------------------------------------------------------------------------------

Pgbench::Pgbench(std::filesystem::path bin_dir, ConnInfo target)
    : program_((bin_dir / "pgbench").string()), target_(std::move(target)) {}

void Pgbench::initialize() const {
  run({"-i", "-s", "1", "-q"});
}

double Pgbench::simple_update_tps(int clients, int seconds) const {
  const std::string c = std::to_string(clients);
  return parse_tps(run({"-N", "-c", c, "-j", c, "-T", std::to_string(seconds), "-n"}));
}

double Pgbench::script_tps(const std::filesystem::path& script_file, int clients,
                           int seconds) const {
  return script_tps(script_file, clients, seconds, {});
}

double Pgbench::script_tps(const std::filesystem::path& script_file, int clients, int seconds,
                           const std::vector<std::string>& options) const {
  const std::string c = std::to_string(clients);
  std::vector<std::string> argv{"-n", "-f", script_file.string(),   "-c", c, "-j",
                                c,    "-T", std::to_string(seconds)};
  argv.insert(argv.end(), options.begin(), options.end());
  return parse_tps(run(argv));
}

double Pgbench::first_statement_ms(const std::filesystem::path& script_file, int seconds) const {
  const std::string output =
      run({"-n", "-r", "-f", script_file.string(), "-T", std::to_string(seconds)});
  // After "statement latencies in milliseconds...": one line per command, its latency first.
  const auto header = output.find("statement latencies");
  if (header != std::string::npos) {
    const auto line = output.find('\n', header);
    if (line != std::string::npos) return std::stod(output.substr(line + 1));
  }
  throw std::runtime_error("no statement latencies in pgbench's output:\n" + output);
}

std::string Pgbench::run(const std::vector<std::string>& options) const {
  std::vector<std::string> argv{program_};
  argv.insert(argv.end(), options.begin(), options.end());
  if (!target_.host.empty()) argv.insert(argv.end(), {"-h", target_.host});
  if (!target_.port.empty()) argv.insert(argv.end(), {"-p", target_.port});
  if (!target_.user.empty()) argv.insert(argv.end(), {"-U", target_.user});
  argv.push_back(target_.database);
  // The password travels in the environment: an argument would show in ps.
  std::vector<std::string> env;
  if (!target_.password.empty()) env.push_back("PGPASSWORD=" + target_.password);
  auto result = run_process(argv, env);
  check_interrupted();
  if (result.exit_code != 0) {
    throw std::runtime_error("pgbench exited with " + std::to_string(result.exit_code) + ":\n" +
                             result.output);
  }
  return std::move(result.output);
}

TempFile::TempFile(std::string_view name_prefix, std::string_view suffix,
                   std::string_view content) {
  std::string name = "/tmp/" + std::string(name_prefix) + "XXXXXX" + std::string(suffix);
  const int fd = mkstemps(name.data(), static_cast<int>(suffix.size()));
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "mkstemps " + name);
  path_ = name;
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      std::filesystem::remove(path_);
      throw std::system_error(error, std::generic_category(), "writing " + name);
    }
    written += static_cast<std::size_t>(n);
  }
  close(fd);
}

TempFile::~TempFile() {
  std::error_code ignored;
  std::filesystem::remove(path_, ignored);
}

// ---------------------------------------------------------------------------------------------

Measurement measure(const std::vector<Operation>& ops, int seconds) {
  std::latch ready(static_cast<std::ptrdiff_t>(ops.size()));
  std::vector<ClientResult> results(ops.size());
  {
    std::vector<std::jthread> clients;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      clients.emplace_back(run_client, std::cref(ops[i]), std::chrono::seconds(seconds),
                           std::ref(ready), std::ref(results[i]));
    }
  }
  check_interrupted();
  return summarize(results);
}

double percentile(const std::vector<double>& sorted, double fraction) {
  if (sorted.empty()) return 0;
  const auto index = static_cast<std::size_t>(fraction * static_cast<double>(sorted.size() - 1));
  return sorted[index];
}

void open_all(pg::Pool& pool) {
  std::vector<pg::Pool::Lease> leases;
  for (int i = 0; i < pool.size(); ++i) leases.push_back(pool.acquire());
}

}  // namespace runledger::bench
