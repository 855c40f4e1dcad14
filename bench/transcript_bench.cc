// transcript_bench: the transcript store's hot path and its large entries.
//
//  1. The agent step, one model turn with one tool call: append_turn (a 4 KiB assistant turn and
//     its one intent) + complete_with_result (a small result and its 4 KiB tool_result entry),
//     two statements and two commits. Each client steps its own claimed run; steps/s and per-step
//     latency at 1 and 16 clients.
//  2. Next to it, on the same server in the same run, pgbench with a single-row INSERT script at
//     the same client count. The ratio (2 x steps/s) / pgbench tps reads as "how much of what
//     this machine's PostgreSQL can commit the agent loop gets".
//  3. 1 MiB appends, one client: MiB/s.
//  4. A streaming read of a 200 MiB transcript: the process's RSS before, during and after, to
//     show that read() holds a bounded window of the transcript, not all of it.
//
// Usage: transcript_bench [--seconds N]   (N seconds per measurement, default 5)
//
// Starts a throwaway durable embedded cluster under /tmp, unless DATABASE_URL names a database
// to use instead. That must be a scratch database: the bench dispatches, claims and deletes runs
// (only runs whose dispatch key starts with "transcript-bench-"), appends about 200 MiB of
// transcript there, and creates and drops the table bench_insert.
//
// Not a test: it prints tables and fails only when something cannot run at all.
#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "bench/bench_support.h"
#include "cluster/cluster.h"
#include "ids/ids.h"
#include "ledger/ledger.h"
#include "migrations/migrations.h"
#include "pg/pg.h"
#include "transcript/statements.h"  // private: the append's own SQL, for pgbench to run (paired rounds)
#include "transcript/transcript.h"

namespace {

using namespace runledger;
using namespace runledger::bench;
using transcript::EntryKind;
using transcript::StepIntent;
using transcript::StepOutcome;

constexpr std::string_view kBenchDatabase = "bench";
// Every run the bench creates carries this prefix in its dispatch and thread keys, so that it
// deletes only its own runs.
constexpr std::string_view kKeyPrefix = "transcript-bench-";
constexpr int kClientCounts[] = {1, 16};
constexpr int kPairedRounds = 9;
constexpr int kPairedSeconds = 2;
// One step's two transcript entries: about what a model turn and a tool's output weigh.
constexpr std::size_t kTurnBytes = 4 << 10;
constexpr std::size_t kToolResultBytes = 4 << 10;
const std::string kStepResult = "exit 0";
// The largest budget the ledger's default Options admit: a client moves to a fresh run when its
// run has made max_steps tool calls.
constexpr ledger::Budget kStepBudget{86'400, 10'000};

constexpr std::size_t kLargeEntryBytes = 1 << 20;
constexpr int kMinLargeAppends = 50;
// The streamed transcript: this many kLargeEntryBytes entries (200 MiB).
constexpr int kStreamEntries = 200;

constexpr std::string_view kInsertScript =
    "INSERT INTO bench_insert (body) VALUES (repeat('x', 100));\n";

constexpr double kMiB = 1024.0 * 1024.0;

std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t word = rng();
    for (std::size_t j = 0; j < 8 && i + j < n; ++j) out[i + j] = static_cast<char>(word >> 8 * j);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Process memory, from /proc/self

// A "VmXxx:   1234 kB" line of /proc/self/status, in bytes; -1 when absent.
std::int64_t proc_status_bytes(std::string_view field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(field) && line.size() > field.size() && line[field.size()] == ':') {
      return std::stoll(line.substr(field.size() + 1)) * 1024;
    }
  }
  return -1;
}

std::int64_t rss_bytes() {
  return proc_status_bytes("VmRSS");
}

// Resets VmHWM (the peak RSS) to the current RSS; false when the kernel does not allow it.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// ---------------------------------------------------------------------------------------------
// The bench database. Its statements touch the ledger's live_runs directly: a bench sets up and
// clears its own rows (by dispatch-key prefix) in a scratch database, which no module API offers.

class BenchDatabase : public ScratchDatabase {
 public:
  using ScratchDatabase::ScratchDatabase;

  void delete_bench_runs() {
    pqxx::nontransaction tx(conn());
    tx.exec_params("DELETE FROM live_runs WHERE dispatch_key LIKE $1 || '%'",
                   std::string(kKeyPrefix));
  }

  void create_insert_table() {
    exec("DROP TABLE IF EXISTS bench_insert");
    exec("CREATE TABLE bench_insert (id bigserial primary key, body text)");
  }

  void truncate_insert_table() { exec("TRUNCATE bench_insert"); }
  void drop_insert_table() { exec("DROP TABLE IF EXISTS bench_insert"); }
};

// ---------------------------------------------------------------------------------------------
// Runs

ledger::Owner make_owner(int i) {
  return {SlotName(std::string(kKeyPrefix) + "bot-" + std::to_string(i)),
          IncarnationId(random_uuid())};
}

// Dispatches a fresh run and claims it for `owner`.
ledger::Claim start_run(ledger::Ledger& ledger, const ledger::Owner& owner,
                        std::optional<ledger::Budget> budget) {
  ledger::DispatchRequest request;
  request.dispatch_key = std::string(kKeyPrefix) + random_uuid();
  request.thread_key = request.dispatch_key + "-thread";
  request.requester = "transcript-bench";
  request.budget = budget;
  const RunId run = ledger.dispatch(request).run.run_id;
  return ledger.claim(owner, run);
}

// One client of the step workload: an agent loop without the model and the tools, stepping
// through its own claimed run.
class Agent {
 public:
  Agent(ledger::Ledger& ledger, transcript::Store& store, ledger::Owner owner,
        const std::string& turn, const std::string& tool_result)
      : ledger_(ledger),
        store_(store),
        owner_(std::move(owner)),
        turn_(turn),
        tool_result_(tool_result),
        claim_(start_run(ledger_, owner_, kStepBudget)) {
    args_["cmd"] = "make test";
  }

  // One step: the turn asking for one tool call, then the call's completion and result.
  int step() {
    if (next_step_ > kStepBudget.max_steps) {
      claim_ = start_run(ledger_, owner_, kStepBudget);
      next_step_ = 1;
      ++rotations_;
    }
    const RunId& run = claim_.run.run_id;
    const Generation generation = claim_.run.generation;
    const StepNo step(next_step_);
    const std::vector<StepIntent> intents{
        StepIntent{step, "bash", "call-" + std::to_string(next_step_), args_}};
    store_.append_turn(run, generation, turn_, intents);
    store_.complete_with_result(run, generation, step, StepOutcome::success(kStepResult),
                                tool_result_);
    ++next_step_;
    ++steps_;
    return 1;
  }

  // Steps made, warm-up ones included.
  std::int64_t steps() const { return steps_; }
  // Fresh runs moved to after the first reached its step budget.
  int rotations() const { return rotations_; }

 private:
  ledger::Ledger& ledger_;
  transcript::Store& store_;
  ledger::Owner owner_;
  const std::string& turn_;
  const std::string& tool_result_;
  ledger::Claim claim_;
  nlohmann::json args_ = nlohmann::json::object();
  std::int64_t next_step_ = 1;
  std::int64_t steps_ = 0;
  int rotations_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Measurements

struct StepRow {
  int clients = 0;
  Measurement measurement;
  Load load;
  std::int64_t steps = 0;  // warm-up included, as the server's counters are
  int rotations = 0;
};

StepRow measure_steps(BenchDatabase& db, const Server& server, int clients, int seconds) {
  const std::string turn = random_bytes(kTurnBytes, 1);
  const std::string tool_result = random_bytes(kToolResultBytes, 2);
  StepRow row;
  row.clients = clients;
  std::optional<LoadMeter> meter;
  {
    pg::Pool pool(db.url(), clients);
    open_all(pool);
    ledger::Ledger ledger(pool);
    transcript::Store store(pool, ledger);
    std::vector<std::unique_ptr<Agent>> agents;
    std::vector<Operation> ops;
    for (int i = 0; i < clients; ++i) {
      agents.push_back(std::make_unique<Agent>(ledger, store, make_owner(i), turn, tool_result));
      ops.emplace_back([agent = agents.back().get()] { return agent->step(); });
    }
    spdlog::info("agent steps, {} client(s)", clients);
    db.checkpoint();
    meter.emplace(db, server);
    row.measurement = measure(ops, seconds);
    for (const auto& agent : agents) {
      row.steps += agent->steps();
      row.rotations += agent->rotations();
    }
  }  // the pool's sessions end here: LoadMeter::finish waits for them
  row.load = meter->finish();
  return row;
}

// A fenced one-statement append of a 100-byte entry per op, each client on its own run: the
// shape of pgbench's single-row INSERT, so the ratio isolates what fencing and chaining cost.
Measurement measure_small_appends(BenchDatabase& db, int clients, int seconds) {
  const std::string body = random_bytes(100, 4);
  pg::Pool pool(db.url(), clients);
  open_all(pool);
  ledger::Ledger ledger(pool);
  transcript::Store store(pool, ledger);
  std::vector<ledger::Claim> claims;
  std::vector<Operation> ops;
  for (int i = 0; i < clients; ++i) claims.push_back(start_run(ledger, make_owner(i), kStepBudget));
  for (const auto& claim : claims) {
    ops.emplace_back([&store, &claim, &body] {
      store.append(claim.run.run_id, claim.run.generation, transcript::EntryKind::user, body);
      return 1;
    });
  }
  spdlog::info("100 B fenced appends, {} client(s)", clients);
  db.checkpoint();
  return measure(ops, seconds);
}

struct PgbenchRow {
  double tps = 0;
  Load load;
};

// One round of the paired comparison, back to back: pgbench's INSERT, then the append's own
// statement run by pgbench (what the statement costs), then the append through Store (what the
// client library adds).
struct PairedRound {
  double pgbench_tps = 0;
  double pgbench_append_tps = 0;
  double appends_per_s = 0;
};

PgbenchRow measure_pgbench(BenchDatabase& db, const Server& server, const Pgbench& pgbench,
                           const std::filesystem::path& script, int clients, int seconds) {
  spdlog::info("pgbench INSERT, {} client(s)", clients);
  db.truncate_insert_table();
  db.checkpoint();
  LoadMeter meter(db, server);
  PgbenchRow row;
  row.tps = pgbench.script_tps(script, clients, seconds);
  row.load = meter.finish();
  return row;
}

// The append statement (transcript/statements.h) as a pgbench script: $1..$4 become pgbench
// variables, which -M prepared sends as parameters, as Store does.
std::string append_script() {
  std::string text = transcript::sql::kAppend.sql;
  const std::pair<std::string_view, std::string_view> names[] = {
      {"$1", ":run"}, {"$2", ":generation"}, {"$3", ":kind"}, {"$4", ":body"}};
  for (const auto& [placeholder, variable] : names) {
    for (auto at = text.find(placeholder); at != std::string::npos;
         at = text.find(placeholder, at + variable.size())) {
      text.replace(at, placeholder.size(), variable);
    }
  }
  return text + ";\n";
}

// pgbench running the append statement on a run of its own, 1 client, 100 B entries.
double measure_pgbench_appends(BenchDatabase& db, const Pgbench& pgbench,
                               const std::filesystem::path& script, int seconds) {
  pg::Pool pool(db.url(), 1);
  ledger::Ledger ledger(pool);
  const ledger::Claim claim = start_run(ledger, make_owner(0), kStepBudget);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string body = "body=\\x";
  for (const unsigned char c : random_bytes(100, 5)) {
    body += kHex[c >> 4];
    body += kHex[c & 15];
  }
  spdlog::info("the append statement run by pgbench, 1 client");
  db.checkpoint();
  return pgbench.script_tps(script, 1, seconds,
                            {"-M", "prepared", "-D", "run=" + claim.run.run_id.value(), "-D",
                             "generation=" + std::to_string(claim.run.generation.value()), "-D",
                             "kind=user", "-D", body});
}

// One client and one run, for the large entries: a fresh run, or `claim`'s.
struct SingleClient {
  SingleClient(const std::string& url, const std::optional<ledger::Claim>& held)
      : pool(url, 1), ledger(pool), store(pool, ledger), claim(held ? *held : start(ledger)) {}
  static ledger::Claim start(ledger::Ledger& ledger) {
    return start_run(ledger, make_owner(0), std::nullopt);
  }
  pg::Pool pool;
  ledger::Ledger ledger;
  transcript::Store store;
  ledger::Claim claim;
};

struct AppendRow {
  int appends = 0;
  double seconds = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  Load load;
  std::optional<ledger::Claim> claim;  // the run appended to
};

// 1 MiB appends to a fresh run for `seconds`, or until kMinLargeAppends, whichever comes later.
AppendRow measure_large_appends(BenchDatabase& db, const Server& server, const std::string& body,
                                int seconds) {
  spdlog::info("1 MiB appends");
  AppendRow row;
  std::optional<LoadMeter> meter;
  {
    SingleClient client(db.url(), std::nullopt);
    const RunId& run = client.claim.run.run_id;
    const Generation generation = client.claim.run.generation;
    client.store.append(run, generation, EntryKind::tool_result, body);  // prepares it
    db.checkpoint();
    meter.emplace(db, server);
    std::vector<double> latencies_ms;
    const auto start = Clock::now();
    for (;;) {
      const auto before = Clock::now();
      if (before - start >= std::chrono::seconds(seconds) &&
          static_cast<int>(latencies_ms.size()) >= kMinLargeAppends) {
        break;
      }
      check_interrupted();
      client.store.append(run, generation, EntryKind::tool_result, body);
      latencies_ms.push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - before).count());
    }
    row.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    row.appends = static_cast<int>(latencies_ms.size());
    std::sort(latencies_ms.begin(), latencies_ms.end());
    row.p50_ms = percentile(latencies_ms, 0.50);
    row.p99_ms = percentile(latencies_ms, 0.99);
    row.claim = client.claim;
  }  // the session ends here: LoadMeter::finish waits for it
  row.load = meter->finish();
  return row;
}

struct StreamRow {
  std::int64_t entries = 0;
  std::int64_t bytes = 0;
  double seconds = 0;
  std::int64_t rss_before = 0;
  std::int64_t rss_peak_sampled = 0;  // the largest RSS seen from inside the callback
  std::int64_t rss_peak_hwm = -1;     // VmHWM after the read (reset before it); -1: unavailable
  std::int64_t rss_after = 0;
  std::int64_t bound = 0;  // what transcript.h promises: page * slice + the largest entry
};

// Tops the run's transcript up to kStreamEntries 1 MiB entries, frees `body`, then reads it all.
StreamRow measure_stream(const std::string& url, const ledger::Claim& claim, std::string& body) {
  SingleClient client(url, claim);
  const RunId& run = client.claim.run.run_id;
  const Generation generation = client.claim.run.generation;
  for (auto have = client.store.head(run).seq; have < kStreamEntries; ++have) {
    check_interrupted();
    client.store.append(run, generation, EntryKind::tool_result, body);
  }
  std::string().swap(body);
  malloc_trim(0);

  spdlog::info("streaming read of {} entries", client.store.head(run).seq);
  const transcript::Options options;
  StreamRow row;
  row.bound = static_cast<std::int64_t>(static_cast<std::size_t>(options.read_page_entries) *
                                            options.read_slice_bytes +
                                        kLargeEntryBytes);
  row.rss_before = rss_bytes();
  const bool hwm = reset_peak_rss();
  row.rss_peak_sampled = row.rss_before;
  const auto start = Clock::now();
  client.store.read(run, 1, [&](const transcript::Entry& e) {
    if (e.seq != row.entries + 1) {
      throw std::runtime_error("read() returned entry " + std::to_string(e.seq) + " after " +
                               std::to_string(row.entries));
    }
    if (e.body.size() != kLargeEntryBytes) {
      throw std::runtime_error("entry " + std::to_string(e.seq) + " has " +
                               std::to_string(e.body.size()) + " bytes, not 1 MiB");
    }
    ++row.entries;
    row.bytes += static_cast<std::int64_t>(e.body.size());
    row.rss_peak_sampled = std::max(row.rss_peak_sampled, rss_bytes());
  });
  row.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  row.rss_after = rss_bytes();
  if (hwm) row.rss_peak_hwm = proc_status_bytes("VmHWM");
  return row;
}

// ---------------------------------------------------------------------------------------------
// The report

struct Report {
  std::vector<std::string> header;
  std::vector<StepRow> steps;
  std::map<int, PgbenchRow> pgbench;
  std::map<int, Measurement> small_appends;
  std::vector<PairedRound> paired;  // 1 client, fenced 100 B append against pgbench INSERT
  AppendRow appends;
  StreamRow stream;
};

// `value` with `decimals` decimals, or "n/a" when negative (unknown).
std::string number(double value, int decimals) {
  if (value < 0) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

double mib(std::int64_t bytes) {
  return static_cast<double>(bytes) / kMiB;
}

void print_report(const Report& r) {
  for (const auto& line : r.header) std::printf("%s\n", line.c_str());

  // Written out rather than padded by printf, which counts the two bytes of "µ" as two columns.
  std::printf(
      "\n### Agent steps (append_turn + complete_with_result)\n\n"
      "| clients | steps/s | commits/s | p50 µs/step | p99 µs/step |\n"
      "|---------|---------|-----------|-------------|-------------|\n");
  int rotations = 0;
  for (const auto& s : r.steps) {
    const auto& m = s.measurement;
    std::printf("| %7d | %7.0f | %9.0f | %11.0f | %11.0f |\n", s.clients, m.ops_per_s,
                2 * m.ops_per_s, m.p50_us, m.p99_us);
    rotations += s.rotations;
  }
  if (rotations > 0) {
    std::printf(
        "\n%d time(s) a client reached %d steps and moved to a fresh run (dispatch + claim) "
        "inside a timed step.\n",
        rotations, kStepBudget.max_steps);
  }

  std::printf(
      "\n### Against pgbench (single-row INSERT script, same clients)\n\n"
      "| clients | agent commits/s | pgbench INSERT tps | ratio |\n"
      "|---------|-----------------|--------------------|-------|\n");
  for (const auto& s : r.steps) {
    const auto it = r.pgbench.find(s.clients);
    if (it == r.pgbench.end()) continue;
    const double commits = 2 * s.measurement.ops_per_s;
    std::printf("| %7d | %15.0f | %18.0f | %5.2f |\n", s.clients, commits, it->second.tps,
                commits / it->second.tps);
  }
  std::printf("\nratio: agent commits/s (2 x steps/s) / pgbench INSERT tps.\n");

  std::printf(
      "\n### Fenced 100 B append, one statement (append(user)), against the same pgbench INSERT\n\n"
      "| clients | appends/s | p50 µs | p99 µs | pgbench INSERT tps | ratio |\n"
      "|---------|-----------|--------|--------|--------------------|-------|\n");
  for (const auto& [clients, m] : r.small_appends) {
    const auto it = r.pgbench.find(clients);
    if (it == r.pgbench.end()) continue;
    std::printf("| %7d | %9.0f | %6.0f | %6.0f | %18.0f | %5.2f |\n", clients, m.ops_per_s,
                m.p50_us, m.p99_us, it->second.tps, m.ops_per_s / it->second.tps);
  }

  std::printf(
      "\n### Paired rounds, 1 client, %d s each, back to back: pgbench INSERT, the append's "
      "statement run by pgbench, the fenced 100 B append through Store\n\n"
      "| round | pgbench INSERT tps | append statement by pgbench/s | ratio | appends/s "
      "(Store) | ratio |\n"
      "|-------|--------------------|-------------------------------|-------|------------------|"
      "-------|\n",
      kPairedSeconds);
  std::vector<double> ratios;
  std::vector<double> statement_ratios;
  for (std::size_t i = 0; i < r.paired.size(); ++i) {
    const auto& pair = r.paired[i];
    ratios.push_back(pair.appends_per_s / pair.pgbench_tps);
    statement_ratios.push_back(pair.pgbench_append_tps / pair.pgbench_tps);
    std::printf("| %5zu | %18.0f | %29.0f | %5.2f | %16.0f | %5.2f |\n", i + 1, pair.pgbench_tps,
                pair.pgbench_append_tps, statement_ratios.back(), pair.appends_per_s,
                ratios.back());
  }
  if (!ratios.empty()) {
    std::sort(ratios.begin(), ratios.end());
    std::sort(statement_ratios.begin(), statement_ratios.end());
    std::printf(
        "\nmedian ratio over %zu rounds: the statement by pgbench %.2f, the append through Store "
        "%.2f (pgbench -M prepared, as Store prepares its statements)\n",
        ratios.size(), statement_ratios[statement_ratios.size() / 2], ratios[ratios.size() / 2]);
  }

  std::printf(
      "\n### Where it goes (server counters and CPU time over each measurement)\n\n"
      "| workload       | clients | write xacts/step | WAL B/commit | commits/WAL fsync | "
      "server CPU | server CPU µs/commit | client CPU | machine CPU | sessions were (sampled) |\n"
      "|----------------|---------|------------------|--------------|-------------------|"
      "------------|----------------------|------------|-------------|-------------------------|"
      "\n");
  const auto print_load = [](const char* workload, int clients, const std::string& per_step,
                             const Load& load) {
    const auto ratio = [](std::int64_t a, std::int64_t b) {
      return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : -1.0;
    };
    const double server_us_per_commit =
        load.server_cores < 0 || load.write_transactions <= 0
            ? -1.0
            : load.server_cores * load.seconds * 1e6 / static_cast<double>(load.write_transactions);
    std::printf("| %-14s | %7d | %16s | %12s | %17s | %10s | %20s | %10s | %11s | %s |\n", workload,
                clients, per_step.c_str(),
                number(ratio(load.wal_bytes, load.write_transactions), 0).c_str(),
                number(ratio(load.write_transactions, load.wal_syncs), 1).c_str(),
                number(load.server_cores, 2).c_str(), number(server_us_per_commit, 0).c_str(),
                number(load.client_cores, 2).c_str(), number(load.machine_cores, 2).c_str(),
                format_waits(load.waits, 4).c_str());
  };
  for (const auto& s : r.steps) {
    print_load("agent step", s.clients,
               number(s.steps > 0 ? static_cast<double>(s.load.write_transactions) /
                                        static_cast<double>(s.steps)
                                  : -1.0,
                      2),
               s.load);
    if (const auto it = r.pgbench.find(s.clients); it != r.pgbench.end()) {
      print_load("pgbench INSERT", s.clients, "-", it->second.load);
    }
  }
  std::printf(
      "\nwrite xacts/step: transaction ids the server assigned per step made (warm-up "
      "included); commits/WAL fsync: write transactions per pg_stat_wal.wal_sync (group "
      "commit); CPU: CPU-seconds per second (cores) of the server's processes, of the client "
      "(this process, or pgbench), and of the whole machine (%u CPUs; the rest is other load); "
      "sessions were: the client sessions' state every %lld ms (CPU: running, idle: waiting for "
      "the client, else the wait event), as a share of all samples.\n",
      std::thread::hardware_concurrency(), static_cast<long long>(kWaitSampleInterval.count()));

  const auto& a = r.appends;
  const auto per_append = [&](double total) {
    return a.appends > 0 && total >= 0 ? total / a.appends : -1.0;
  };
  std::printf(
      "\n### 1 MiB appends (append(tool_result), 1 client)\n\n"
      "| appends | seconds | MiB/s | p50 ms | p99 ms | WAL MiB/append | WAL fsyncs/append | "
      "server CPU | session was (sampled) |\n"
      "|---------|---------|-------|--------|--------|----------------|-------------------|"
      "------------|-----------------------|\n"
      "| %7d | %7.1f | %5.1f | %6.1f | %6.1f | %14s | %17s | %10s | %s |\n",
      a.appends, a.seconds, a.seconds > 0 ? a.appends * (kLargeEntryBytes / kMiB) / a.seconds : 0,
      a.p50_ms, a.p99_ms, number(per_append(mib(a.load.wal_bytes)), 2).c_str(),
      number(per_append(static_cast<double>(a.load.wal_syncs)), 2).c_str(),
      number(a.load.server_cores, 2).c_str(), format_waits(a.load.waits, 4).c_str());

  const auto& s = r.stream;
  char hwm[32] = "n/a";
  if (s.rss_peak_hwm >= 0) std::snprintf(hwm, sizeof hwm, "%.1f", mib(s.rss_peak_hwm));
  std::printf(
      "\n### Streaming read (read(run, 1, fn) of the 1 MiB entries, fn counts bytes)\n\n"
      "| transcript MiB | entries | read MiB/s | RSS before MiB | RSS peak MiB (sampled in fn) | "
      "RSS peak MiB (VmHWM) | RSS after MiB | peak - before MiB | bound MiB (transcript.h) |\n"
      "|----------------|---------|------------|----------------|------------------------------|"
      "----------------------|---------------|-------------------|--------------------------|\n");
  std::printf("| %14.0f | %7lld | %10.1f | %14.1f | %28.1f | %20s | %13.1f | %17.1f | %24.1f |\n",
              mib(s.bytes), static_cast<long long>(s.entries),
              s.seconds > 0 ? mib(s.bytes) / s.seconds : 0, mib(s.rss_before),
              mib(s.rss_peak_sampled), hwm, mib(s.rss_after),
              mib(std::max(s.rss_peak_sampled, s.rss_peak_hwm) - s.rss_before), mib(s.bound));
  std::printf(
      "\nbound: Options::read_page_entries x read_slice_bytes + the largest entry, as "
      "transcript.h states it (defaults).\n");
}

void run(const Args& args) {
  Server server;
  open_server(server, kBenchDatabase);
  migrations::apply(server.url);
  BenchDatabase db(server.url);
  db.delete_bench_runs();
  db.create_insert_table();

  Report report;
  report.header = db.server_lines(server);
  report.header.push_back(std::to_string(args.seconds) + " s per measurement, " +
                          std::to_string(std::thread::hardware_concurrency()) +
                          " CPUs, CHECKPOINT before each");
  report.header.push_back("agent step: append_turn(" + std::to_string(kTurnBytes) +
                          " B assistant turn, 1 intent) + complete_with_result(success, " +
                          std::to_string(kToolResultBytes) +
                          " B tool_result); each client steps its own claimed run");
  report.header.push_back("commits per step: 2, round trips per commit: 1");
  report.header.push_back(
      "reference: pgbench -n -f insert.sql -c C -j C -T " + std::to_string(args.seconds) +
      ", insert.sql: " + std::string(kInsertScript.substr(0, kInsertScript.size() - 1)));

  const Pgbench pgbench(cluster::find_bin_dir(), parse_url(server.url));
  const TempFile script("transcript-bench-insert-", ".sql", kInsertScript);
  const TempFile append_sql("transcript-bench-append-", ".sql", append_script());
  for (const int clients : kClientCounts) {
    report.pgbench[clients] =
        measure_pgbench(db, server, pgbench, script.path(), clients, args.seconds);
  }
  for (const int clients : kClientCounts) {
    report.steps.push_back(measure_steps(db, server, clients, args.seconds));
  }
  for (const int clients : kClientCounts) {
    report.small_appends[clients] = measure_small_appends(db, clients, args.seconds);
  }
  // This machine's fsync latency drifts by 2x within a minute, which moves a ratio of two
  // measurements taken minutes apart more than anything measured. Short back-to-back pairs
  // see the same disk; the median pair is the figure to quote.
  for (int round = 0; round < kPairedRounds; ++round) {
    PairedRound pair;
    pair.pgbench_tps = measure_pgbench(db, server, pgbench, script.path(), 1, kPairedSeconds).tps;
    pair.pgbench_append_tps =
        measure_pgbench_appends(db, pgbench, append_sql.path(), kPairedSeconds);
    pair.appends_per_s = measure_small_appends(db, 1, kPairedSeconds).ops_per_s;
    report.paired.push_back(pair);
  }

  {
    std::string body = random_bytes(kLargeEntryBytes, 3);
    report.appends = measure_large_appends(db, server, body, args.seconds);
    report.stream = measure_stream(server.url, *report.appends.claim, body);
  }

  db.delete_bench_runs();
  db.drop_insert_table();
  print_report(report);
}

}  // namespace

int main(int argc, char** argv) {
  // Progress and the cluster's logs go to stderr, so that stdout is only the report.
  spdlog::set_default_logger(spdlog::stderr_color_mt("transcript_bench"));
  install_signal_handlers();
  try {
    run(parse_args(argc, argv, "transcript_bench"));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transcript_bench: %s\n", e.what());
    return 1;
  }
}
