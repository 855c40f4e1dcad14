// ledger_bench: throughput and latency of the ledger's hot operations (claim, fenced write,
// heartbeat), each next to pgbench's simple-update transaction (-N) run on the same server in the
// same run. The ratio reads as "how much of what this machine's PostgreSQL can commit the ledger
// gets", which survives a change of machine far better than the raw numbers.
//
// Usage: ledger_bench [--seconds N]   (N seconds per measurement, default 5)
//
// Starts a throwaway durable embedded cluster under /tmp, unless DATABASE_URL names a database
// to use instead. That must be a scratch database: the bench inserts, claims and deletes runs in
// live_runs (only runs whose dispatch key starts with "ledger-bench-"; it refuses to start while
// other live runs exist, since claim_next would take them), and creates the database "pgbench"
// next to it.
//
// Not a test: it prints a table and fails only when something cannot run at all.
#include <fcntl.h>
#include <signal.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <latch>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "cluster/cluster.h"
#include "ids/ids.h"
#include "ledger/ledger.h"
#include "migrations/migrations.h"
#include "pg/pg.h"

extern char** environ;

namespace {

using namespace runledger;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kBenchDatabase = "bench";
constexpr std::string_view kPgbenchDatabase = "pgbench";
// Every run the bench creates carries this prefix in its dispatch and thread keys, so that it
// deletes only its own runs.
constexpr std::string_view kKeyPrefix = "ledger-bench-";
constexpr int kClientCounts[] = {1, 8};
// Untimed operations per client before the clock starts: they prepare the statements on each
// connection, as pgbench's first transactions do, and are not what a steady state costs.
constexpr int kWarmupOps = 5;
// Queued runs per measured second of claiming: several times what a durable server commits on
// this kind of machine, so the queue does not run dry (if it does, the table says so).
constexpr int kRunsPerSecond = 10'000;
// About the size of a tool-call record the bot writes under a fence.
const std::string kWriteBody(200, 'x');

// Set by SIGINT/SIGTERM: measurements stop early and main unwinds, which stops the cluster
// (a Ctrl-C must not leave a postmaster behind in /tmp).
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "used from a signal handler");

void on_signal(int) {
  g_interrupted = true;
}

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

// ---------------------------------------------------------------------------------------------
// Command line

struct Args {
  int seconds = 5;
};

Args parse_args(int argc, char** argv) {
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
      throw std::invalid_argument("usage: ledger_bench [--seconds N]");
    }
  }
  return args;
}

// ---------------------------------------------------------------------------------------------
// Connection URLs

// The parts of a postgresql:// URI that pgbench takes as separate arguments. Query parameters
// (sslmode, ...) are not passed on: the bench targets a local server.
struct ConnInfo {
  std::string user;
  std::string password;
  std::string host;
  std::string port;
  std::string database;
};

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

// ---------------------------------------------------------------------------------------------
// pgbench

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

class Pgbench {
 public:
  Pgbench(std::filesystem::path bin_dir, ConnInfo target)
      : program_((bin_dir / "pgbench").string()), target_(std::move(target)) {}

  // pgbench's tables at scale 1 (100k accounts), replacing any from an earlier run.
  void initialize() const { run({"-i", "-s", "1", "-q"}); }

  // The simple-update transaction (-N: UPDATE accounts, SELECT, INSERT history; no contended
  // tellers/branches updates), one thread per client, no vacuum before it (-n).
  double simple_update_tps(int clients, int seconds) const {
    const std::string c = std::to_string(clients);
    return parse_tps(run({"-N", "-c", c, "-j", c, "-T", std::to_string(seconds), "-n"}));
  }

 private:
  std::string run(const std::vector<std::string>& options) const {
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

  std::string program_;
  ConnInfo target_;
};

// ---------------------------------------------------------------------------------------------
// The bench database: setup statements the bench runs outside the ledger's API

constexpr pg::Statement kInsertWrite{
    "bench_insert_write", "INSERT INTO bench_writes (run_id, n, body) VALUES ($1::uuid, $2, $3)"};

class BenchDatabase {
 public:
  explicit BenchDatabase(std::string url) : url_(std::move(url)), conn_(url_) {}

  const std::string& url() const { return url_; }

  std::string value(const std::string& query) { return exec(query)[0][0].as<std::string>(); }

  // claim_next takes any claimable run: other live runs here would be claimed and lost.
  void refuse_foreign_live_runs() {
    pqxx::nontransaction tx(conn_);
    const auto foreign = tx.exec_params(
                               "SELECT count(*) FROM live_runs WHERE status IN ('queued', "
                               "'running') AND dispatch_key NOT LIKE $1 || '%'",
                               std::string(kKeyPrefix))[0][0]
                             .as<std::int64_t>();
    if (foreign > 0) {
      throw std::runtime_error(url_without_password() + " holds " + std::to_string(foreign) +
                               " live runs the bench did not create: use a scratch database");
    }
  }

  void create_bench_table() {
    exec("DROP TABLE IF EXISTS bench_writes");
    exec("CREATE TABLE bench_writes (run_id uuid, n bigint, body text)");
  }

  void create_database(std::string_view name) {
    pqxx::nontransaction tx(conn_);
    if (tx.exec_params("SELECT 1 FROM pg_database WHERE datname = $1", std::string(name)).empty()) {
      tx.exec0("CREATE DATABASE " + conn_.quote_name(std::string(name)));
    }
  }

  // Deletes the bench's runs and writes, then queues `runs` fresh ones and leaves the table
  // vacuumed, analyzed and checkpointed, so every measurement starts from the same state rather
  // than from the dead rows of the one before.
  void reset_runs(int runs) {
    const std::string prefix(kKeyPrefix);
    pqxx::nontransaction tx(conn_);
    tx.exec_params("DELETE FROM live_runs WHERE dispatch_key LIKE $1 || '%'", prefix);
    tx.exec0("TRUNCATE bench_writes");
    // Distinct created_at, 1 ms apart, as real dispatches have: identical keys would let the
    // claimable index deduplicate them into posting lists no production queue has.
    tx.exec_params(R"sql(
      INSERT INTO live_runs (dispatch_key, thread_key, requester, budget_wall_s, budget_max_steps,
                             created_at)
      SELECT $1 || g, $1 || 'thread-' || g, 'ledger-bench', 3600, 200,
             runledger_now() - ($2::int - g) * interval '1 millisecond'
      FROM generate_series(1, $2::int) AS g)sql",
                   prefix, runs);
    tx.exec0("VACUUM ANALYZE live_runs");
    checkpoint(tx);
  }

  void delete_bench_runs() {
    pqxx::nontransaction tx(conn_);
    tx.exec_params("DELETE FROM live_runs WHERE dispatch_key LIKE $1 || '%'",
                   std::string(kKeyPrefix));
    tx.exec0("DROP TABLE IF EXISTS bench_writes");
  }

  // Before each measurement, ours and pgbench's alike: each then starts right after a
  // checkpoint, paying the same full-page writes, instead of whoever runs into one paying it.
  void checkpoint() {
    pqxx::nontransaction tx(conn_);
    checkpoint(tx);
  }

 private:
  pqxx::result exec(const std::string& query) {
    pqxx::nontransaction tx(conn_);
    return tx.exec(query);
  }

  void checkpoint(pqxx::nontransaction& tx) {
    // Needs superuser or pg_checkpoint; on a DATABASE_URL without either, measurements simply
    // start wherever the checkpoint cycle is.
    try {
      tx.exec0("CHECKPOINT");
    } catch (const pqxx::insufficient_privilege&) {
      if (!warned_checkpoint_) spdlog::warn("cannot CHECKPOINT (no privilege): skipping it");
      warned_checkpoint_ = true;
    }
  }

  std::string url_without_password() const {
    const ConnInfo info = parse_url(url_);
    return info.user + "@" + info.host + ":" + info.port + "/" + info.database;
  }

  std::string url_;
  pqxx::connection conn_;
  bool warned_checkpoint_ = false;
};

// ---------------------------------------------------------------------------------------------
// Timed client loops

// One client's operation, performed once: returns how many ledger operations it completed, 0
// only when a claim found nothing left to claim.
using Operation = std::function<int()>;

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

struct Measurement {
  double ops_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  bool ran_dry = false;
};

double percentile(const std::vector<double>& sorted, double fraction) {
  if (sorted.empty()) return 0;
  const auto index = static_cast<std::size_t>(fraction * static_cast<double>(sorted.size() - 1));
  return sorted[index];
}

Measurement summarize(std::vector<ClientResult>& results) {
  std::int64_t ops = 0;
  Clock::time_point start = Clock::time_point::max();
  Clock::time_point end = Clock::time_point::min();
  std::vector<double> latencies;
  Measurement m;
  for (auto& r : results) {
    if (r.error) std::rethrow_exception(r.error);
    ops += r.ops;
    start = std::min(start, r.start);
    end = std::max(end, r.end);
    latencies.insert(latencies.end(), r.latencies_us.begin(), r.latencies_us.end());
    m.ran_dry = m.ran_dry || r.ran_dry;
  }
  std::sort(latencies.begin(), latencies.end());
  m.ops_per_s = static_cast<double>(ops) / std::chrono::duration<double>(end - start).count();
  m.p50_us = percentile(latencies, 0.50);
  m.p99_us = percentile(latencies, 0.99);
  return m;
}

// Runs ops[i] on client thread i for `seconds`, all at once.
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

// ---------------------------------------------------------------------------------------------
// The ledger measurements

struct Row {
  std::string operation;
  int clients;
  Measurement measurement;
  double pgbench_tps;
};

// Opens every connection of the pool before the clock starts: pgbench's tps leaves out
// connecting too.
void open_all(pg::Pool& pool) {
  std::vector<pg::Pool::Lease> leases;
  for (int i = 0; i < pool.size(); ++i) leases.push_back(pool.acquire());
}

std::vector<ledger::Owner> make_owners(int clients) {
  std::vector<ledger::Owner> owners;
  for (int i = 0; i < clients; ++i) {
    owners.push_back({SlotName(std::string(kKeyPrefix) + "bot-" + std::to_string(i)),
                      IncarnationId(random_uuid())});
  }
  return owners;
}

std::vector<Operation> claim_ops(ledger::Ledger& ledger, const std::vector<ledger::Owner>& owners) {
  std::vector<Operation> ops;
  for (const auto& owner : owners) {
    ops.emplace_back(
        [&ledger, &owner] { return static_cast<int>(ledger.claim_next(owner, 1).size()); });
  }
  return ops;
}

std::vector<Operation> fenced_write_ops(ledger::Ledger& ledger,
                                        const std::vector<ledger::Claim>& held) {
  std::vector<Operation> ops;
  for (const auto& claim : held) {
    ops.emplace_back([&ledger, &claim, n = std::int64_t{0}]() mutable {
      ledger.write_fenced(claim.run.run_id, claim.run.generation, [&](pqxx::work& tx) {
        pg::exec(tx, kInsertWrite, claim.run.run_id.value(), n++, kWriteBody);
      });
      return 1;
    });
  }
  return ops;
}

std::vector<Operation> heartbeat_ops(ledger::Ledger& ledger,
                                     const std::vector<ledger::Owner>& owners,
                                     const std::vector<ledger::Claim>& held) {
  std::vector<Operation> ops;
  for (std::size_t i = 0; i < held.size(); ++i) {
    ops.emplace_back([&ledger, &owner = owners[i], &claim = held[i]] {
      if (!ledger.heartbeat(owner, {{claim.run.run_id, claim.run.generation}}).empty()) {
        throw std::runtime_error("a heartbeat lost run " + claim.run.run_id.value());
      }
      return 1;
    });
  }
  return ops;
}

// Each owner claims the one run it then writes under and heartbeats.
std::vector<ledger::Claim> claim_one_each(ledger::Ledger& ledger,
                                          const std::vector<ledger::Owner>& owners) {
  std::vector<ledger::Claim> held;
  for (const auto& owner : owners) {
    auto claims = ledger.claim_next(owner, 1);
    if (claims.size() != 1) throw std::runtime_error("no run to hold for the owner writes");
    held.push_back(std::move(claims[0]));
  }
  return held;
}

std::vector<Row> measure_ledger(BenchDatabase& db, int clients, int seconds, double pgbench_tps) {
  pg::Pool pool(db.url(), clients);
  open_all(pool);
  ledger::Ledger ledger(pool);
  const auto owners = make_owners(clients);
  std::vector<Row> rows;

  spdlog::info("claims, {} client(s)", clients);
  db.reset_runs(kRunsPerSecond * seconds + clients * kWarmupOps);
  rows.push_back(
      {"claim_next(1)", clients, measure(claim_ops(ledger, owners), seconds), pgbench_tps});

  spdlog::info("fenced writes, {} client(s)", clients);
  db.reset_runs(clients);
  const auto held = claim_one_each(ledger, owners);
  db.checkpoint();
  rows.push_back(
      {"write_fenced", clients, measure(fenced_write_ops(ledger, held), seconds), pgbench_tps});

  spdlog::info("heartbeats, {} client(s)", clients);
  db.checkpoint();
  rows.push_back({"heartbeat(1)", clients, measure(heartbeat_ops(ledger, owners, held), seconds),
                  pgbench_tps});
  return rows;
}

// ---------------------------------------------------------------------------------------------
// The report

std::string filesystem_note(const std::filesystem::path& path) {
  struct statfs fs {};
  constexpr long kTmpfsMagic = 0x01021994;
  if (statfs(path.c_str(), &fs) == 0 && fs.f_type == kTmpfsMagic) {
    return " (WARNING: on tmpfs, fsync costs nothing)";
  }
  return "";
}

void print_report(const std::vector<std::string>& header, const std::vector<Row>& rows) {
  for (const auto& line : header) std::printf("%s\n", line.c_str());
  // Written out rather than padded by printf, which counts the two bytes of "µ" as two columns.
  std::printf(
      "\n| operation      | clients |     ops/s |   p50 µs |   p99 µs | pgbench -N tps | ratio |\n"
      "|----------------|---------|-----------|----------|----------|----------------|-------|\n");
  bool ran_dry = false;
  for (const auto& r : rows) {
    const auto& m = r.measurement;
    std::printf("| %-14s | %7d | %9.0f | %8.0f | %8.0f | %14.0f | %5.2f |%s\n", r.operation.c_str(),
                r.clients, m.ops_per_s, m.p50_us, m.p99_us, r.pgbench_tps,
                m.ops_per_s / r.pgbench_tps, m.ran_dry ? " *" : "");
    ran_dry = ran_dry || m.ran_dry;
  }
  if (ran_dry) {
    std::printf("\n* the queue ran dry before the time was up: raise kRunsPerSecond\n");
  }
}

struct Server {
  std::optional<cluster::EmbeddedCluster> cluster;  // engaged unless DATABASE_URL is set
  std::string url;
  std::string description;
};

// Root in a fresh directory under /tmp: a throwaway cluster never reuses another's files.
// fsync, synchronous_commit and full_page_writes stay on (durable) as for pgbench: the ratio
// compares like with like.
void start_embedded(Server& server) {
  char root[] = "/tmp/runledger-bench-XXXXXX";
  if (mkdtemp(root) == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp");
  cluster::Options options;
  options.root = root;
  options.durable = true;
  options.remove_on_stop = true;
  options.database = std::string(kBenchDatabase);
  spdlog::info("starting an embedded cluster in {}", root);
  server.cluster.emplace(options);
  server.cluster->start();
  server.url = server.cluster->url();
  server.description = std::string("embedded cluster in ") + root + filesystem_note(root);
}

void run(const Args& args) {
  Server server;
  if (const char* url = std::getenv("DATABASE_URL"); url != nullptr && *url != '\0') {
    server.url = url;
    server.description = "DATABASE_URL";
  } else {
    start_embedded(server);
  }
  migrations::apply(server.url);
  BenchDatabase db(server.url);
  db.refuse_foreign_live_runs();
  db.create_bench_table();

  const std::vector<std::string> header{
      db.value("SELECT version()"),
      "server: " + server.description + "; fsync=" + db.value("SHOW fsync") +
          ", synchronous_commit=" + db.value("SHOW synchronous_commit") +
          ", full_page_writes=" + db.value("SHOW full_page_writes"),
      std::to_string(args.seconds) + " s per measurement, " +
          std::to_string(std::thread::hardware_concurrency()) +
          " CPUs, CHECKPOINT before each; pgbench -i -s 1, then pgbench -N -c C -j C -T " +
          std::to_string(args.seconds) + " -n"};

  db.create_database(kPgbenchDatabase);
  ConnInfo pgbench_target = parse_url(server.url);
  pgbench_target.database = std::string(kPgbenchDatabase);
  const Pgbench pgbench(cluster::find_bin_dir(), pgbench_target);
  spdlog::info("pgbench -i -s 1");
  pgbench.initialize();
  std::map<int, double> tps;
  for (const int clients : kClientCounts) {
    spdlog::info("pgbench -N, {} client(s)", clients);
    db.checkpoint();
    tps[clients] = pgbench.simple_update_tps(clients, args.seconds);
  }

  std::vector<Row> rows;
  for (const int clients : kClientCounts) {
    for (auto& row : measure_ledger(db, clients, args.seconds, tps[clients])) {
      rows.push_back(std::move(row));
    }
  }
  db.delete_bench_runs();
  print_report(header, rows);
}

}  // namespace

int main(int argc, char** argv) {
  // Progress and the cluster's logs go to stderr, so that stdout is only the report.
  spdlog::set_default_logger(spdlog::stderr_color_mt("ledger_bench"));
  install_signal_handlers();
  try {
    run(parse_args(argc, argv));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ledger_bench: %s\n", e.what());
    return 1;
  }
}
