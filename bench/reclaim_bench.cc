// reclaim_bench: how long a bot's runs stay dead after `kill -9`.
//
// A real `runledger bot` claims N runs (default 1,000) and is held mid-step in every one of
// them: each run's tool call has its intent written and its effect not yet started (failpoint
// bot.after_intent armed as a pause). The bot is killed with SIGKILL, and then:
//
//  1. restarted under the same slot: holding the slot proves its predecessor dead, so it takes
//     the runs over at once, settles each (the in-flight bash call gets its synthetic result)
//     and resumes them;
//  2. for comparison, a second batch is held and killed the same way, and a bot under another
//     slot picks the runs up: it must wait for their leases (Options::lease_ttl, 30 s) to expire.
//
// For each: time from spawning the new process to every run settled, and to every run finished
// (the script's last turn follows the settled call), polled every 10 ms from outside; and the new
// bot's own boot timeline (the `[slot +ms]` lines it logs). Target for (1): all runs settled and
// resumed within 2 s of the process starting.
//
// Usage: reclaim_bench [--runs N]
//
// Starts a throwaway durable embedded cluster under /tmp, unless DATABASE_URL names a scratch
// database (the bench refuses one that holds runs of its own making from an earlier run).
//
// Not a test: it prints tables and fails only when something cannot run at all.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "bench/bench_support.h"
#include "ledger/ledger.h"
#include "migrations/migrations.h"
#include "subprocess/subprocess.h"

namespace runledger::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr std::string_view kBenchDatabase = "bench";
constexpr int kDefaultRuns = 1000;

int parse_runs(int argc, char** argv) {
  int runs = kDefaultRuns;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--runs" && i + 1 < argc) {
      runs = std::stoi(argv[++i]);
    } else {
      throw std::invalid_argument("usage: reclaim_bench [--runs N]");
    }
  }
  if (runs < 1) throw std::invalid_argument("--runs must be positive");
  return runs;
}

// A bot process with its output in a file (the boot timeline is read from it afterwards).
struct BotProcess {
  subprocess::Child child;
  fs::path log;
  Clock::time_point spawned;
};

// Dies with the bench (SIGKILL): a bot holding 1,000 runs must not outlive a crashed bench.
BotProcess spawn_bot(const std::string& url, const fs::path& work, const std::string& slot,
                     int capacity, const std::string& failpoints) {
  subprocess::Spawn bot({RUNLEDGER_BINARY, "bot", "--slot", slot, "--work-dir",
                         (work / "sandboxes").string(), "--capacity", std::to_string(capacity)});
  bot.env = {{"DATABASE_URL", url},
             {"RUNLEDGER_FAILPOINTS",
              failpoints.empty() ? std::nullopt : std::optional<std::string>(failpoints)}};
  bot.output = subprocess::Output::file;
  bot.output_file =
      work / (slot + "-" + std::to_string(Clock::now().time_since_epoch().count()) + ".log");
  bot.death_signal = SIGKILL;
  const auto spawned = Clock::now();
  return BotProcess{subprocess::spawn(bot), bot.output_file, spawned};
}

void stop(BotProcess& bot, int signal) {
  bot.child.kill(signal);
  bot.child.wait();
}

// The bot's boot timeline: its "[slot +N ms] ..." lines.
std::vector<std::string> timeline(const fs::path& log) {
  std::vector<std::string> lines;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    // [2026-11-30 14:16:09.293] [info] [reclaim-held +114 ms] took over 1000 runs ...
    const auto ms = line.find(" ms] ");
    const auto open = line.rfind(" [", ms);
    if (ms != std::string::npos && open != std::string::npos)
      lines.push_back(line.substr(open + 1));
  }
  return lines;
}

class Batch {
 public:
  Batch(ScratchDatabase& db, std::string prefix) : db_(db), prefix_(std::move(prefix)) {}

  // One bash call per run (unsafe: settled with a synthetic result), then the final turn.
  void dispatch(ledger::Ledger& ledger, int runs) {
    const json script = {
        {"turns",
         {{{"text", "one command"},
           {"calls", {{{"id", "c1"}, {"tool", "bash"}, {"args", {{"command", "true"}}}}}}}}},
        {"result", {{"done", true}}}};
    for (int i = 0; i < runs; ++i) {
      ledger::DispatchRequest r;
      r.dispatch_key = prefix_ + std::to_string(i);
      r.thread_key = r.dispatch_key;
      r.requester = "reclaim-bench";
      r.profile = {{"script", script}};
      ledger.dispatch(r);
    }
  }

  int count(const char* statement) {
    pqxx::nontransaction tx(db_.conn());
    return tx.exec_params1(statement, prefix_ + "%")[0].as<int>();
  }
  int intents() {
    return count(
        "SELECT count(*) FROM run_steps s JOIN live_runs r USING (run_id) "
        "WHERE r.dispatch_key LIKE $1 AND s.state = 'intent'");
  }
  int settled() {
    return count(
        "SELECT count(*) FROM run_steps s JOIN live_runs r USING (run_id) "
        "WHERE r.dispatch_key LIKE $1 AND s.settlement IS NOT NULL");
  }
  int finished() {
    return count(
        "SELECT count(*) FROM live_runs WHERE dispatch_key LIKE $1 AND status = 'finished'");
  }

 private:
  ScratchDatabase& db_;
  std::string prefix_;
};

// Waits (polling every 10 ms) until `done()`; the time since `since`, or nullopt at `limit`.
template <typename Done>
std::optional<double> wait_ms(Clock::time_point since, std::chrono::seconds limit, Done done) {
  while (!done()) {
    check_interrupted();
    if (Clock::now() - since > limit) return std::nullopt;
    std::this_thread::sleep_for(10ms);
  }
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

struct Outcome {
  std::string how;
  std::optional<double> settled_ms;
  std::optional<double> finished_ms;
  std::vector<std::string> timeline;
};

// Dispatches a batch, holds it in a bot mid-step, kills the bot, and times its successor.
Outcome measure(ScratchDatabase& db, ledger::Ledger& ledger, const std::string& url,
                const fs::path& work, int runs, const std::string& prefix,
                const std::string& successor_slot, const std::string& how) {
  Batch batch(db, prefix);
  batch.dispatch(ledger, runs);
  spdlog::info("{}: {} runs dispatched; a bot holds them mid-step", how, runs);
  BotProcess held = spawn_bot(url, work, "reclaim-held", runs, "bot.after_intent=pause");
  if (!wait_ms(held.spawned, 120s, [&] { return batch.intents() == runs; })) {
    stop(held, SIGKILL);
    throw std::runtime_error("the bot did not reach the intent of every run within 120 s");
  }
  stop(held, SIGKILL);
  spdlog::info("{}: bot killed with {} steps in flight; starting its successor", how, runs);

  Outcome out;
  out.how = how;
  BotProcess next = spawn_bot(url, work, successor_slot, runs, "");
  out.settled_ms = wait_ms(next.spawned, 120s, [&] { return batch.settled() == runs; });
  out.finished_ms = wait_ms(next.spawned, 120s, [&] { return batch.finished() == runs; });
  stop(next, SIGTERM);
  out.timeline = timeline(next.log);
  return out;
}

std::string format_ms(const std::optional<double>& ms) {
  if (!ms) return "> 120 s";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", *ms);
  return buf;
}

void run(int runs) {
  Server server;
  open_server(server, kBenchDatabase);
  migrations::apply(server.url);
  ScratchDatabase db(server.url);
  if (db.value("SELECT count(*) FROM live_runs WHERE dispatch_key LIKE 'reclaim-bench-%'") != "0") {
    throw std::runtime_error(
        "the database holds runs of an earlier reclaim_bench: use a fresh scratch database");
  }
  const fs::path work = fs::temp_directory_path() / ("reclaim-bench-" + std::to_string(getpid()));
  fs::create_directories(work);
  std::vector<Outcome> outcomes;
  {
    pg::Pool pool(server.url, 2);
    ledger::Ledger ledger(pool);
    outcomes.push_back(measure(db, ledger, server.url, work, runs, "reclaim-bench-a-",
                               "reclaim-held", "same slot: take over at once"));
    outcomes.push_back(measure(db, ledger, server.url, work, runs, "reclaim-bench-b-",
                               "reclaim-other", "other slot: wait for lease expiry"));
  }

  for (const auto& line : db.server_lines(server)) std::printf("%s\n", line.c_str());
  std::printf(
      "%d runs, each held by a killed bot between its bash call's intent and its effect; "
      "lease_ttl 30 s (the default); %u CPUs\n",
      runs, std::thread::hardware_concurrency());
  std::printf(
      "\n| successor                          | all settled ms | all finished ms |\n"
      "|------------------------------------|----------------|-----------------|\n");
  for (const auto& o : outcomes) {
    std::printf("| %-34s | %14s | %15s |\n", o.how.c_str(), format_ms(o.settled_ms).c_str(),
                format_ms(o.finished_ms).c_str());
  }
  std::printf(
      "\nms from spawning the successor process; settled: every in-flight step has its "
      "settlement recorded (the run is resumed right after); finished: every run completed its "
      "last turn.\n");
  for (const auto& o : outcomes) {
    std::printf("\nboot timeline of the successor (%s):\n", o.how.c_str());
    for (const auto& line : o.timeline) std::printf("  %s\n", line.c_str());
  }
  fs::remove_all(work);
}

}  // namespace
}  // namespace runledger::bench

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("reclaim_bench"));
  runledger::bench::install_signal_handlers();
  try {
    runledger::bench::run(runledger::bench::parse_runs(argc, argv));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reclaim_bench: %s\n", e.what());
    return 1;
  }
}
