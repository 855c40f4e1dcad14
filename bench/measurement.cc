// Timed client loops with latency percentiles, the command line's seconds per measurement, and
// the Ctrl-C that stops measuring.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <latch>
#include <stdexcept>
#include <thread>
#include <utility>

#include "bench/bench_support.h"

namespace runledger::bench {
namespace {

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "used from a signal handler");

void on_signal(int) {
  g_interrupted = true;
}

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

}  // namespace

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
