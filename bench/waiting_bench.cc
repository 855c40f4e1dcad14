// waiting_bench: what 100,000 waiting instances cost an executor.
//
//  1. An executor runs in *another process* (this program re-executed with --executor), with
//     kExecutorThreads threads. Its RSS is read from /proc before anything is created.
//  2. kClientThreads client threads create the waiting instances in batches of kBatch
//     (Coordinator::create_batch, one statement each); each instance's workflow sleeps an hour on
//     its first step. The time to create them, then the time until the executor has run every
//     one of them to its sleep.
//  3. The executor's RSS once they all wait: a waiting instance holds no thread and no memory.
//  4. Wake latency: kWakeSamples instances, one at a time, sleep until a time 1.5 s ahead on the
//     database clock; the step after the sleep returns the wall clock (the database runs on this
//     machine: the same clock). Latency = that minus the wake time, with all the others waiting.
//  Reference, same cluster, same run: pgbench inserting kBatch rows per transaction at
//  kClientThreads clients, beside the creation rate.
//
// Usage: waiting_bench [--seconds N] [--instances N]   (default 100000 instances)
// Starts a throwaway durable embedded cluster under /tmp, unless DATABASE_URL names a scratch
// database. Not a test: it prints tables and fails only when something cannot run at all.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
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
constexpr int kExecutorThreads = 8;
constexpr int kClientThreads = 2;
constexpr int kBatch = 1000;
constexpr int kWakeSamples = 20;
constexpr std::string_view kInsertScript =
    "INSERT INTO bench_insert (body) SELECT repeat('x', 100) FROM generate_series(1, 1000);\n";

std::int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// input {"until_ms": T} (epoch ms on the database clock): sleeps until T, then returns the wall
// clock in µs.
class SleeperWorkflow : public coordinator::Workflow {
 public:
  json run(const json& input, coordinator::Step& step) override {
    step.sleep_until("nap", input.at("until_ms").get<std::int64_t>());
    return step.run("woke", [](std::stop_token) { return json(wall_us()); });
  }
};

coordinator::Registry registry() {
  coordinator::Registry r;
  coordinator::Registration sleeper;
  sleeper.name = "bench.sleeper";
  sleeper.max_duration = std::chrono::hours(48);
  sleeper.workflow = std::make_shared<SleeperWorkflow>();
  r.add(std::move(sleeper));
  return r;
}

// VmRSS of `pid` in MiB.
double rss_mib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmRSS:")) return std::stod(line.substr(6)) / 1024.0;
  }
  throw std::runtime_error("no VmRSS for process " + std::to_string(pid));
}

std::int64_t db_now_ms(ScratchDatabase& db) {
  return std::stoll(db.value("SELECT (extract(epoch FROM runledger_now()) * 1000)::bigint"));
}

int count_waiting(ScratchDatabase& db, const std::string& prefix) {
  return std::stoi(
      db.value("SELECT count(*) FROM wf_instances WHERE status = 'waiting' AND "
               "instance_id LIKE '" +
               prefix + "%'"));
}

struct Figures {
  double rss_before_mib = 0;
  double rss_waiting_mib = 0;
  double rss_after_mib = 0;
  double create_s = 0;
  double all_waiting_s = 0;  // from the first create
  std::vector<double> wake_ms;
  double pgbench = 0;
};

void run(const Args& args, int instances) {
  Server server;
  open_server(server, kBenchDatabase);
  migrations::apply(server.url);
  ScratchDatabase db(server.url);
  db.exec("DROP TABLE IF EXISTS bench_insert");
  db.exec("CREATE TABLE bench_insert (id bigserial PRIMARY KEY, body text)");
  const auto r = registry();
  pg::Pool pool(server.url, kClientThreads + 1);
  coordinator::Coordinator client(pool, r);

  const ExecutorProcess executor("waiting_bench", server.url);
  const pid_t pid = executor.pid();
  std::this_thread::sleep_for(1500ms);  // the executor is up, idle and listening
  Figures f;
  f.rss_before_mib = rss_mib(pid);

  spdlog::info("creating {} instances that sleep an hour, {} client threads", instances,
               kClientThreads);
  const std::string batch = "w-" + random_uuid().substr(0, 8) + "-";
  const std::int64_t hour_ahead = db_now_ms(db) + 3'600'000;
  db.checkpoint();
  const auto start = Clock::now();
  {
    std::atomic<int> next{0};
    std::vector<std::jthread> clients;
    for (int c = 0; c < kClientThreads; ++c) {
      clients.emplace_back([&] {
        for (int first; (first = next.fetch_add(kBatch)) < instances;) {
          check_interrupted();
          std::vector<std::pair<InstanceId, json>> items;
          for (int i = first; i < std::min(first + kBatch, instances); ++i) {
            items.emplace_back(InstanceId(batch + std::to_string(i)),
                               json{{"until_ms", hour_ahead}});
          }
          client.create_batch("bench.sleeper", items);
        }
      });
    }
  }
  f.create_s = std::chrono::duration<double>(Clock::now() - start).count();
  spdlog::info("created in {:.1f} s; waiting for the executor to run each to its sleep",
               f.create_s);
  for (int waiting = 0; waiting < instances;) {
    check_interrupted();
    std::this_thread::sleep_for(500ms);
    waiting = count_waiting(db, batch);
  }
  f.all_waiting_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::this_thread::sleep_for(1s);
  f.rss_waiting_mib = rss_mib(pid);

  spdlog::info("wake latency, {} samples", kWakeSamples);
  for (int i = 0; i < kWakeSamples; ++i) {
    check_interrupted();
    const std::string id = "wake-" + batch + std::to_string(i);
    const std::int64_t until = db_now_ms(db) + 1500;
    client.create("bench.sleeper", InstanceId(id), {{"until_ms", until}});
    for (;;) {
      std::this_thread::sleep_for(50ms);
      const auto instance = client.get(InstanceId(id));
      if (instance.status == coordinator::InstanceStatus::complete) {
        f.wake_ms.push_back(
            static_cast<double>(instance.output.get<std::int64_t>() - until * 1000) / 1e3);
        break;
      }
      if (instance.status == coordinator::InstanceStatus::errored) {
        throw std::runtime_error("wake instance errored: " + instance.error.dump());
      }
    }
  }
  std::sort(f.wake_ms.begin(), f.wake_ms.end());
  f.rss_after_mib = rss_mib(pid);

  const Pgbench pgbench(cluster::find_bin_dir(), parse_url(server.url));
  const TempFile script("waiting-bench-insert-", ".sql", kInsertScript);
  db.checkpoint();
  f.pgbench = pgbench.script_tps(script.path(), kClientThreads, args.seconds);
  db.exec("DROP TABLE bench_insert");

  for (const auto& line : db.server_lines(server)) std::printf("%s\n", line.c_str());
  std::printf(
      "%u CPUs; executor in another process with %d threads; instances created by %d client "
      "threads; reference: pgbench -n -f insert.sql -c %d -T %d, insert.sql: %s\n",
      std::thread::hardware_concurrency(), kExecutorThreads, kClientThreads, kClientThreads,
      args.seconds, std::string(kInsertScript.substr(0, kInsertScript.size() - 1)).c_str());
  std::printf("\n| measurement | figure | reference |\n|---|---|---|\n");
  std::printf(
      "| create %d instances (create_batch of %d, %d clients) | %.1f s, %.0f/s | "
      "pgbench %.0f rows/s (%d rows per INSERT, %d clients): ratio %.2f |\n",
      instances, kBatch, kClientThreads, f.create_s, instances / f.create_s, f.pgbench * kBatch,
      kBatch, kClientThreads, instances / f.create_s / (f.pgbench * kBatch));
  std::printf(
      "| until all %d wait (each replayed to its sleep) | %.1f s from the first create | "
      "|\n",
      instances, f.all_waiting_s);
  std::printf(
      "| executor RSS | before %.1f MiB, all waiting %.1f MiB, after the wakes %.1f MiB | "
      "|\n",
      f.rss_before_mib, f.rss_waiting_mib, f.rss_after_mib);
  std::printf(
      "| wake latency of one due sleep, %d others waiting, %d samples | p50 %.2f ms, "
      "max %.2f ms (min %.2f ms) | target < 20 ms |\n",
      instances, kWakeSamples, percentile(f.wake_ms, 0.5), f.wake_ms.back(), f.wake_ms.front());
}

}  // namespace
}  // namespace runledger::bench

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--executor") == 0) {
    return runledger::bench::run_executor_until_sigterm(argv[2], runledger::bench::registry(),
                                                        runledger::bench::kExecutorThreads);
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("waiting_bench"));
  runledger::bench::install_signal_handlers();
  // --instances N is ours; the rest are the benches' common options.
  int instances = 100'000;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--instances") == 0 && i + 1 < argc) {
      instances = std::atoi(argv[++i]);
      if (instances < 1) {
        std::fprintf(stderr, "waiting_bench: --instances takes a positive number\n");
        return 2;
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  try {
    runledger::bench::run(
        runledger::bench::parse_args(static_cast<int>(rest.size()), rest.data(), "waiting_bench"),
        instances);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "waiting_bench: %s\n", e.what());
    return 1;
  }
}
