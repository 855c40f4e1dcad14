// coordinator_bench: what a coordinator step costs, beside pgbench on the same cluster.
//
//  1. Sequential: one instance runs kSequentialSteps trivial step.run calls on one executor
//     thread (Executor::run_one in this process): steps/s and µs per step.
//  2. Parallel: 64 instances of kParallelSteps trivial steps each, on an executor with 64
//     threads (Executor::run in this process): steps/s over all of them.
//  3. Create-to-first-step: an idle executor in *another process* (this program re-executed
//     with --executor) is woken by the creation's NOTIFY; the first step's body records the
//     monotonic clock (system-wide on Linux), which is compared with the time create() was
//     called. p50/p99 over kLatencySamples creations, one at a time.
//  Reference, same cluster, same run: pgbench with a single-row INSERT script, 1 and 8 clients.
//  Every completed step is one statement and at most one commit (INSERT wf_steps + history,
//  fenced); the records of concurrent replays share one (the executor's group commit).
//
// Usage: coordinator_bench [--seconds N]   (pgbench's seconds per measurement, default 5)
// Starts a throwaway durable embedded cluster under /tmp, unless DATABASE_URL names a scratch
// database. Not a test: it prints tables and fails only when something cannot run at all.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "bench/bench_support.h"
#include "bench/executor_process.h"
#include "coordinator/coordinator.h"
#include "ids/ids.h"
#include "migrations/migrations.h"

namespace runledger::bench {
namespace {

using coordinator::json;
using namespace std::chrono_literals;

constexpr std::string_view kBenchDatabase = "bench";
constexpr int kSequentialSteps = 3000;
constexpr int kParallelInstances = 64;
constexpr int kParallelSteps = 100;
// Executor threads for them: more sessions than this on 2 cores cost more than they overlap
// (pgbench INSERT with 64 clients ran at half its 8-client rate here).
constexpr int kParallelThreads = 8;
constexpr int kLatencySamples = 200;
constexpr std::string_view kInsertScript =
    "INSERT INTO bench_insert (body) VALUES (repeat('x', 100));\n";
// The same INSERT after 5 ms idle, as each creation of the latency measurement comes: an
// isolated commit costs more on this kind of machine than one of a back-to-back stream.
constexpr std::string_view kIdleInsertScript =
    "INSERT INTO bench_insert (body) VALUES (repeat('x', 100));\n\\sleep 5 ms\n";

std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// input {"steps": N}: N trivial steps, then returns their count.
class StepsWorkflow : public coordinator::Workflow {
 public:
  json run(const json& input, coordinator::Step& step) override {
    const int n = input.at("steps").get<int>();
    int sum = 0;
    for (int i = 0; i < n; ++i) {
      sum += step.run("s", [i](std::stop_token) { return json(i); }).get<int>() >= 0;
    }
    return json(sum);
  }
};

// Its first step returns the monotonic clock when it ran.
class FirstStepWorkflow : public coordinator::Workflow {
 public:
  json run(const json&, coordinator::Step& step) override {
    return step.run("first", [](std::stop_token) { return json(monotonic_ns()); });
  }
};

coordinator::Registry registry() {
  coordinator::Registry r;
  coordinator::Registration steps;
  steps.name = "bench.steps";
  steps.workflow = std::make_shared<StepsWorkflow>();
  r.add(std::move(steps));
  coordinator::Registration first;
  first.name = "bench.first-step";
  first.workflow = std::make_shared<FirstStepWorkflow>();
  r.add(std::move(first));
  coordinator::Registration unclaimed;  // created only: no executor runs it
  unclaimed.name = "bench.unclaimed";
  r.add(std::move(unclaimed));
  return r;
}

struct Figures {
  double sequential_steps_per_s = 0;
  double sequential_us_per_step = 0;
  double parallel_steps_per_s = 0;
  double latency_p50_ms = 0;
  double latency_p99_ms = 0;
  double create_p50_ms = 0;        // of which the create() call itself
  double create_alone_p50_ms = 0;  // create() with no executor running
  double pgbench_1 = 0;
  double pgbench_8 = 0;
  double pgbench_idle_insert_ms = 0;
};

double sequential(const std::string& url, coordinator::Coordinator& client,
                  const coordinator::Registry& r) {
  client.create("bench.steps", InstanceId("seq-" + random_uuid()), {{"steps", kSequentialSteps}});
  coordinator::Executor executor(url, r, "bench-seq");
  const auto start = Clock::now();
  if (!executor.run_one()) throw std::runtime_error("the sequential instance was not claimed");
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double parallel(const std::string& url, coordinator::Coordinator& client,
                const coordinator::Registry& r) {
  const std::string batch = random_uuid();
  coordinator::Options options;
  options.threads = kParallelThreads;
  coordinator::Executor executor(url, r, "bench-par", options);
  for (int i = 0; i < kParallelInstances; ++i) {
    client.create("bench.steps", InstanceId("par-" + batch + "-" + std::to_string(i)),
                  {{"steps", kParallelSteps}});
  }
  const auto start = Clock::now();
  std::thread loop([&] { executor.run(); });
  // One cheap query every 20 ms: the measurement must not compete with the executor for the
  // two cores.
  pqxx::connection conn(url);
  for (;;) {
    check_interrupted();
    std::this_thread::sleep_for(20ms);
    pqxx::nontransaction tx(conn);
    const int done = tx.exec_params1(
                           "SELECT count(*) FROM wf_instances WHERE status = 'complete' "
                           "AND instance_id LIKE $1",
                           "par-" + batch + "-%")[0]
                         .as<int>();
    if (done == kParallelInstances) break;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  executor.request_stop();
  loop.join();
  return seconds;
}

struct Latencies {
  std::vector<double> total_ms;         // create() called -> first step's body running
  std::vector<double> create_ms;        // create() called -> create() returned (its commit)
  std::vector<double> create_alone_ms;  // the same with no executor running
};

Latencies create_to_first_step(const std::string& url, coordinator::Coordinator& client) {
  Latencies out;
  const std::string batch = random_uuid();
  // The creation's own cost, with nobody woken by it: instances of a workflow no executor runs.
  for (int i = 0; i < kLatencySamples; ++i) {
    const std::int64_t created = monotonic_ns();
    client.create("bench.unclaimed", InstanceId("alone-" + batch + "-" + std::to_string(i)),
                  json::object());
    out.create_alone_ms.push_back(static_cast<double>(monotonic_ns() - created) / 1e6);
    std::this_thread::sleep_for(5ms);
  }
  const ExecutorProcess executor("coordinator_bench", url);
  std::this_thread::sleep_for(1500ms);  // the executor is up, idle and listening
  for (int i = 0; i < kLatencySamples; ++i) {
    check_interrupted();
    const std::string id = "lat-" + batch + "-" + std::to_string(i);
    const std::int64_t created = monotonic_ns();
    client.create("bench.first-step", InstanceId(id), json::object());
    out.create_ms.push_back(static_cast<double>(monotonic_ns() - created) / 1e6);
    // Not polled meanwhile: on 2 cores a poll every few ms competes with the executor it
    // measures. The body's clock reading is the measurement; the poll only collects it.
    std::this_thread::sleep_for(15ms);
    for (;;) {
      const auto instance = client.get(InstanceId(id));
      if (instance.status == coordinator::InstanceStatus::complete) {
        out.total_ms.push_back(static_cast<double>(instance.output.get<std::int64_t>() - created) /
                               1e6);
        break;
      }
      std::this_thread::sleep_for(5ms);
    }
    std::this_thread::sleep_for(20ms);  // idle again
  }
  std::sort(out.total_ms.begin(), out.total_ms.end());
  std::sort(out.create_ms.begin(), out.create_ms.end());
  std::sort(out.create_alone_ms.begin(), out.create_alone_ms.end());
  return out;
}

void run(const Args& args) {
  Server server;
  open_server(server, kBenchDatabase);
  migrations::apply(server.url);
  ScratchDatabase db(server.url);
  db.exec("DROP TABLE IF EXISTS bench_insert");
  db.exec("CREATE TABLE bench_insert (id bigserial PRIMARY KEY, body text)");
  const auto r = registry();
  pg::Pool pool(server.url, 4);
  coordinator::Coordinator client(pool, r);

  Figures f;
  spdlog::info("sequential: one instance, {} steps", kSequentialSteps);
  db.checkpoint();
  const double seq_s = sequential(server.url, client, r);
  f.sequential_steps_per_s = kSequentialSteps / seq_s;
  f.sequential_us_per_step = seq_s * 1e6 / kSequentialSteps;
  spdlog::info("parallel: {} instances x {} steps", kParallelInstances, kParallelSteps);
  db.checkpoint();
  f.parallel_steps_per_s = kParallelInstances * kParallelSteps / parallel(server.url, client, r);
  spdlog::info("create-to-first-step, executor in another process, {} samples", kLatencySamples);
  const auto latencies = create_to_first_step(server.url, client);
  f.latency_p50_ms = percentile(latencies.total_ms, 0.5);
  f.latency_p99_ms = percentile(latencies.total_ms, 0.99);
  f.create_p50_ms = percentile(latencies.create_ms, 0.5);
  f.create_alone_p50_ms = percentile(latencies.create_alone_ms, 0.5);

  const Pgbench pgbench(cluster::find_bin_dir(), parse_url(server.url));
  const TempFile script("coordinator-bench-insert-", ".sql", kInsertScript);
  db.checkpoint();
  f.pgbench_1 = pgbench.script_tps(script.path(), 1, args.seconds);
  db.checkpoint();
  f.pgbench_8 = pgbench.script_tps(script.path(), 8, args.seconds);
  const TempFile idle_script("coordinator-bench-idle-insert-", ".sql", kIdleInsertScript);
  f.pgbench_idle_insert_ms = pgbench.first_statement_ms(idle_script.path(), args.seconds);
  db.exec("DROP TABLE bench_insert");

  for (const auto& line : db.server_lines(server)) std::printf("%s\n", line.c_str());
  std::printf(
      "%u CPUs; a step: step.run of a trivial body = one statement, at most one commit "
      "(concurrent replays' records share one); reference: "
      "pgbench -n -f insert.sql -T %d, insert.sql: %s\n",
      std::thread::hardware_concurrency(), args.seconds,
      std::string(kInsertScript.substr(0, kInsertScript.size() - 1)).c_str());
  std::printf(
      "\n| measurement | figure | pgbench INSERT tps | ratio |\n"
      "|---|---|---|---|\n");
  std::printf(
      "| sequential, 1 instance x %d steps | %.0f steps/s, %.0f µs/step | %.0f (1 client) | %.2f "
      "|\n",
      kSequentialSteps, f.sequential_steps_per_s, f.sequential_us_per_step, f.pgbench_1,
      f.sequential_steps_per_s / f.pgbench_1);
  std::printf(
      "| parallel, %d instances x %d steps, %d executor threads | %.0f steps/s | %.0f (8 clients) "
      "| %.2f |\n",
      kParallelInstances, kParallelSteps, kParallelThreads, f.parallel_steps_per_s, f.pgbench_8,
      f.parallel_steps_per_s / f.pgbench_8);
  std::printf(
      "| create-to-first-step, executor in another process (NOTIFY), %d samples | p50 %.2f ms, "
      "p99 %.2f ms (create() itself: p50 %.2f ms; with no executor running: p50 %.2f ms) | "
      "pgbench INSERT 1 client, after 5 ms idle: %.2f ms (back to back: %.2f ms) | p50 / 2 "
      "isolated INSERTs: %.2f |\n",
      kLatencySamples, f.latency_p50_ms, f.latency_p99_ms, f.create_p50_ms, f.create_alone_p50_ms,
      f.pgbench_idle_insert_ms, 1000.0 / f.pgbench_1,
      f.latency_p50_ms / (2 * f.pgbench_idle_insert_ms));
}

}  // namespace
}  // namespace runledger::bench

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--executor") == 0) {
    // 2 threads: an idle executor as a deployment would run one.
    return runledger::bench::run_executor_until_sigterm(argv[2], runledger::bench::registry(), 2);
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("coordinator_bench"));
  runledger::bench::install_signal_handlers();
  try {
    runledger::bench::run(runledger::bench::parse_args(argc, argv, "coordinator_bench"));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coordinator_bench: %s\n", e.what());
    return 1;
  }
}
