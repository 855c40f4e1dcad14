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
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "bench/bench_support.h"
#include "cluster/cluster.h"
#include "ids/ids.h"
#include "ledger/ledger.h"
#include "migrations/migrations.h"
#include "pg/pg.h"

namespace {

using namespace runledger;
using namespace runledger::bench;

constexpr std::string_view kBenchDatabase = "bench";
constexpr std::string_view kPgbenchDatabase = "pgbench";
// Every run the bench creates carries this prefix in its dispatch and thread keys, so that it
// deletes only its own runs.
constexpr std::string_view kKeyPrefix = "ledger-bench-";
constexpr int kClientCounts[] = {1, 8};
// Queued runs per measured second of claiming: several times what a durable server commits on
// this kind of machine, so the queue does not run dry (if it does, the table says so).
constexpr int kRunsPerSecond = 10'000;
// About the size of a tool-call record the bot writes under a fence.
const std::string kWriteBody(200, 'x');

// ---------------------------------------------------------------------------------------------
// The bench database: setup statements the bench runs outside the ledger's API

constexpr pg::Statement kInsertWrite{
    "bench_insert_write", "INSERT INTO bench_writes (run_id, n, body) VALUES ($1::uuid, $2, $3)"};

class BenchDatabase : public ScratchDatabase {
 public:
  using ScratchDatabase::ScratchDatabase;

  // claim_next takes any claimable run: other live runs here would be claimed and lost.
  void refuse_foreign_live_runs() {
    pqxx::nontransaction tx(conn());
    const auto foreign = tx.exec_params(
                               "SELECT count(*) FROM live_runs WHERE status IN ('queued', "
                               "'running') AND dispatch_key NOT LIKE $1 || '%'",
                               std::string(kKeyPrefix))[0][0]
                             .as<std::int64_t>();
    if (foreign > 0) {
      throw std::runtime_error(url_without_password(url()) + " holds " + std::to_string(foreign) +
                               " live runs the bench did not create: use a scratch database");
    }
  }

  void create_bench_table() {
    exec("DROP TABLE IF EXISTS bench_writes");
    exec("CREATE TABLE bench_writes (run_id uuid, n bigint, body text)");
  }

  // Deletes the bench's runs and writes, then queues `runs` fresh ones and leaves the table
  // vacuumed, analyzed and checkpointed, so every measurement starts from the same state rather
  // than from the dead rows of the one before.
  void reset_runs(int runs) {
    const std::string prefix(kKeyPrefix);
    {
      pqxx::nontransaction tx(conn());
      tx.exec_params("DELETE FROM live_runs WHERE dispatch_key LIKE $1 || '%'", prefix);
      tx.exec0("TRUNCATE bench_writes");
      // Distinct created_at, 1 ms apart, as real dispatches have: identical keys would let the
      // claimable index deduplicate them into posting lists no production queue has.
      tx.exec_params(R"sql(
        INSERT INTO live_runs (dispatch_key, thread_key, requester, budget_wall_s,
                               budget_max_steps, created_at)
        SELECT $1 || g, $1 || 'thread-' || g, 'ledger-bench', 3600, 200,
               runledger_now() - ($2::int - g) * interval '1 millisecond'
        FROM generate_series(1, $2::int) AS g)sql",
                     prefix, runs);
      tx.exec0("VACUUM ANALYZE live_runs");
    }
    checkpoint();
  }

  void delete_bench_runs() {
    pqxx::nontransaction tx(conn());
    tx.exec_params("DELETE FROM live_runs WHERE dispatch_key LIKE $1 || '%'",
                   std::string(kKeyPrefix));
    tx.exec0("DROP TABLE IF EXISTS bench_writes");
  }
};

// ---------------------------------------------------------------------------------------------
// The ledger measurements

struct Row {
  std::string operation;
  int clients;
  Measurement measurement;
  double pgbench_tps;
};

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

void run(const Args& args) {
  Server server;
  open_server(server, kBenchDatabase);
  migrations::apply(server.url);
  BenchDatabase db(server.url);
  db.refuse_foreign_live_runs();
  db.create_bench_table();

  std::vector<std::string> header = db.server_lines(server);
  header.push_back(std::to_string(args.seconds) + " s per measurement, " +
                   std::to_string(std::thread::hardware_concurrency()) +
                   " CPUs, CHECKPOINT before each; pgbench -i -s 1, then pgbench -N -c C -j C -T " +
                   std::to_string(args.seconds) + " -n");

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
    run(parse_args(argc, argv, "ledger_bench"));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ledger_bench: %s\n", e.what());
    return 1;
  }
}
