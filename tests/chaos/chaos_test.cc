// The chaos test: several real bot processes work through many scripted runs while a seeded chaos
// loop kills them (kill -9 at random moments, and SIGKILL at named failpoints), restarts them
// under the same slots, and SIGSTOPs some past their lease (zombies that wake up with a stale
// generation). At the end: every run finished, no effect key twice in the effects log, every
// transcript verifies, no row written by a stale generation, and every settlement rule exercised.
//
// The workload outlasts the chaos: runs are dispatched while it goes on, keeping every bot's
// capacity busy, until the chaos has done what it must (and at least RUNLEDGER_CHAOS_RUNS were
// dispatched), and each tool takes a few milliseconds. (Dispatched all at once, 50 runs of quick
// tools were done within seconds on a fast machine, before the chaos reached them: nothing was
// reclaimed, and the rules were never exercised.) When a check fails, the bots' logs are kept
// and their folder printed.
//
// Profile (environment): RUNLEDGER_CHAOS_SEED (printed; replays a run), RUNLEDGER_CHAOS_RUNS (50,
// the fewest dispatched), RUNLEDGER_CHAOS_KILLS (20), RUNLEDGER_CHAOS_ZOMBIES (2),
// RUNLEDGER_CHAOS_BOTS (3).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "settlement/settlement.h"
#include "tests/ledger/ledger_fixture.h"
#include "tests/support/child_process.h"
#include "transcript/transcript.h"

using namespace runledger;
using namespace runledger::testing;
using nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr int kLeaseMs = 2000;
constexpr int kTurns = 20;
constexpr int kCapacity = 4;  // per bot
// Never more runs than this many times RUNLEDGER_CHAOS_RUNS, however long the chaos takes.
constexpr int kMostRunsFactor = 6;
const std::vector<std::string> kFailpoints = {"bot.after_turn_append", "bot.after_intent",
                                              "bot.after_effect", "bot.after_completion"};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::stoi(v) : fallback;
}

// ~20 steps touching every effect class: write, read, append to a log by bash (unsafe).
json chaos_script() {
  json turns = json::array();
  for (int i = 0; i < kTurns; ++i) {
    json call;
    switch (i % 3) {
      case 0:
        call = {{"id", "w" + std::to_string(i)},
                {"tool", "write_file"},
                {"args", {{"path", "state.txt"}, {"content", "turn " + std::to_string(i)}}}};
        break;
      case 1:
        call = {{"id", "r" + std::to_string(i)},
                {"tool", "read_file"},
                {"args", {{"path", "state.txt"}}}};
        break;
      default:
        call = {{"id", "b" + std::to_string(i)},
                {"tool", "bash"},
                {"args", {{"command", "sleep 0.02; echo $RUNLEDGER_EFFECT_KEY >> effects.txt"}}},
                {"if_restarted",
                 {{{"id", "b" + std::to_string(i) + "-check"},
                   {"tool", "read_file"},
                   {"args", {{"path", "effects.txt"}}}}}}};
    }
    turns.push_back({{"text", "turn " + std::to_string(i)}, {"calls", {call}}});
  }
  return {{"turns", turns}, {"result", {{"done", true}}}};
}

// One start of a bot process: its log, and when it was spawned (wall clock, as the log's).
struct Incarnation {
  fs::path log;
  std::chrono::system_clock::time_point spawned;
};

struct Bot {
  std::string slot;
  pid_t pid = -1;
  std::vector<Incarnation> incarnations;
};

pid_t spawn_bot(const std::string& url, const fs::path& work, Bot& bot,
                const std::string& failpoints) {
  const std::string& slot = bot.slot;
  std::map<std::string, std::optional<std::string>> env = {{"DATABASE_URL", url}};
  env["RUNLEDGER_FAILPOINTS"] =
      failpoints.empty() ? std::nullopt : std::optional<std::string>(failpoints);
  // Chaos kills far more often than production would: a run may be claimed several times before
  // it completes its next step without being stuck, hence --max-takeovers. Each incarnation logs
  // to a file of its own (read afterwards for its boot timeline), not into the test's output.
  fs::create_directories(work / "logs");
  Incarnation incarnation{
      work / "logs" / (slot + "-" + std::to_string(bot.incarnations.size() + 1) + ".log"),
      std::chrono::system_clock::now()};
  bot.incarnations.push_back(incarnation);
  return spawn(
      RUNLEDGER_BINARY,
      {"bot", "--slot", slot, "--work-dir", work.string(), "--lease-ms", std::to_string(kLeaseMs),
       "--capacity", std::to_string(kCapacity), "--max-takeovers", "50"},
      env, incarnation.log.string());
}

// From spawning an incarnation to the line of its boot timeline that says it resumed the runs
// it reclaimed (ms, by the log line's wall-clock timestamp); nullopt when it reclaimed none or
// never got that far (killed while booting).
std::optional<double> restart_to_resume_ms(const Incarnation& incarnation) {
  std::ifstream in(incarnation.log);
  const std::string marker = " runs; taking new work";
  for (std::string line; std::getline(in, line);) {
    // [2026-11-30 14:16:09.293] [info] [bot-1 +512 ms] resumed 3 runs; taking new work
    const auto end = line.find(marker);
    const auto word = line.rfind("resumed ", end);
    if (end == std::string::npos || word == std::string::npos || line.size() < 25) continue;
    if (std::stoi(line.substr(word + 8, end - word - 8)) == 0) return std::nullopt;
    std::tm tm{};
    std::istringstream(line.substr(1, 19)) >> std::get_time(&tm, "%Y-%m-%d %H:%M:%S");
    tm.tm_isdst = -1;
    const auto logged = std::chrono::system_clock::from_time_t(std::mktime(&tm)) +
                        std::chrono::milliseconds(std::stoi(line.substr(21, 3)));
    return std::chrono::duration<double, std::milli>(logged - incarnation.spawned).count();
  }
  return std::nullopt;
}

// The test's folder; kept (with the bots' logs) when `keep` is set.
struct Work {
  fs::path path = fs::temp_directory_path() / ("chaos-" + random_uuid());
  bool keep = false;
  ~Work() {
    if (!keep) fs::remove_all(path);
  }
};

}  // namespace

TEST_CASE("chaos: bots killed and stopped at random and at failpoints never repeat an effect") {
  const unsigned seed = static_cast<unsigned>(
      env_int("RUNLEDGER_CHAOS_SEED", static_cast<int>(std::random_device{}() & 0x7fffffff)));
  const int runs_wanted = env_int("RUNLEDGER_CHAOS_RUNS", 50);
  const int kills_wanted = env_int("RUNLEDGER_CHAOS_KILLS", 20);
  const int zombies_wanted = env_int("RUNLEDGER_CHAOS_ZOMBIES", 2);
  const int bot_count = env_int("RUNLEDGER_CHAOS_BOTS", 3);
  std::printf("chaos seed %u (replay with RUNLEDGER_CHAOS_SEED=%u)\n", seed, seed);
  std::mt19937 rng(seed);

  LedgerFixture f;
  Work work;
  fs::create_directories(work.path);
  transcript::Store store(f.pool, f.ledger);
  std::vector<RunId> run_ids;
  const auto started = std::chrono::steady_clock::now();
  const auto since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  const auto live_runs = [&] {
    return f.sql("SELECT count(*) FROM live_runs WHERE status IN ('queued', 'running')")[0][0]
        .as<int>();
  };
  // Keeps the bots' capacity busy: the chaos always finds runs in flight.
  const auto top_up = [&] {
    const int room = bot_count * kCapacity - live_runs();
    for (int i = 0; i < room && static_cast<int>(run_ids.size()) < runs_wanted * kMostRunsFactor;
         ++i) {
      auto r = request("chaos-" + std::to_string(run_ids.size()));
      r.profile = {{"script", chaos_script()}};
      run_ids.push_back(f.ledger.dispatch(r).run.run_id);
    }
  };
  top_up();

  std::vector<Bot> bots;
  for (int i = 0; i < bot_count; ++i) {
    bots.push_back({"bot-" + std::to_string(i + 1), -1, {}});
    bots.back().pid = spawn_bot(f.db.url(), work.path, bots.back(), "");
  }

  const auto finished_runs = [&] {
    return f
        .sql(
            "SELECT count(*) FROM live_runs WHERE status IN ('finished', 'failed', "
            "'interrupted', 'cancelled')")[0][0]
        .as<int>();
  };
  const auto rules_seen = [&] {
    std::set<std::string> rules;
    for (const auto& row : f.sql("SELECT DISTINCT settlement->>'rule' FROM run_steps "
                                 "WHERE settlement IS NOT NULL")) {
      rules.insert(row[0].as<std::string>());
    }
    return rules;
  };

  int kills = 0, zombies = 0, failpoint_restarts = 0;
  std::optional<double> first_kill_s;  // since the start
  const auto deadline = std::chrono::steady_clock::now() + 240s;
  // Kills come often enough to land at every failpoint, and far enough apart that runs progress
  // between them (a run claimed again and again without progress is interrupted, by design).
  std::uniform_int_distribution<int> pause_ms(200, 1000);
  // Restarts every dead bot; a bot armed at a failpoint kills itself there.
  const auto reap_and_restart = [&](bool arm) {
    for (auto& bot : bots) {
      int status = 0;
      if (waitpid(bot.pid, &status, WNOHANG) != bot.pid) continue;
      if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
        ++kills;
        if (!first_kill_s) first_kill_s = since_start();
      }
      std::string failpoints;
      if (arm && kills < kills_wanted + 40) {
        failpoints =
            kFailpoints[rng() % kFailpoints.size()] + "=kill@" + std::to_string(1 + rng() % 6);
        ++failpoint_restarts;
      }
      bot.pid = spawn_bot(f.db.url(), work.path, bot, failpoints);
    }
  };

  for (;;) {
    const bool chaos_done = kills >= kills_wanted && zombies >= zombies_wanted &&
                            rules_seen().size() == 5 &&
                            static_cast<int>(run_ids.size()) >= runs_wanted;
    if (chaos_done || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(rng)));
    top_up();
    reap_and_restart(true);
    Bot& victim = bots[rng() % bots.size()];
    if (zombies < zombies_wanted && rng() % 6 == 0) {
      kill(victim.pid, SIGSTOP);  // past its lease: it wakes up holding stale generations
      std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs + 1500));
      kill(victim.pid, SIGCONT);
      ++zombies;
    } else if (rng() % 2 == 0) {
      kill(victim.pid, SIGKILL);  // a random moment
      if (!first_kill_s) first_kill_s = since_start();
    }
  }
  const double chaos_s = since_start();
  const int runs = static_cast<int>(run_ids.size());
  // Calm: no more failpoints; let every run finish.
  for (auto& bot : bots) kill(bot.pid, SIGKILL);
  for (auto& bot : bots) {
    int status = 0;
    waitpid(bot.pid, &status, 0);
    ++kills;
    bot.pid = spawn_bot(f.db.url(), work.path, bot, "");
  }
  const auto calm_deadline = std::chrono::steady_clock::now() + 120s;
  while (finished_runs() < runs && std::chrono::steady_clock::now() < calm_deadline) {
    std::this_thread::sleep_for(100ms);
  }
  for (auto& bot : bots) kill(bot.pid, SIGTERM);
  for (auto& bot : bots) {
    int status = 0;
    waitpid(bot.pid, &status, 0);
  }

  // Checks.
  const auto rules = rules_seen();
  std::map<std::string, int> effect_keys;
  {
    std::ifstream in(work.path / "effects.log");
    for (std::string key, tool, generation; in >> key >> tool >> generation;) ++effect_keys[key];
  }
  int duplicates = 0;
  for (const auto& [key, n] : effect_keys) duplicates += n - 1;
  int steps = 0, bad_chains = 0, stale_rows = 0, wrong_rules = 0;
  const auto classes =
      settlement::EffectClasses::parse("pure: read_file\nidempotent: write_file\n");
  for (const auto& run : run_ids) {
    if (!store.verify(run).ok) ++bad_chains;
    std::int64_t generation_seen = 0;
    store.read(run, 1, [&](const transcript::Entry& e) {
      if (e.generation.value() < generation_seen)
        ++stale_rows;  // a stale owner wrote after a newer one
      generation_seen = std::max(generation_seen, e.generation.value());
    });
    for (const auto& s : store.steps(run)) {
      ++steps;
      if (s.result_generation && *s.result_generation < s.intent_generation) ++stale_rows;
      if (s.settlement.is_null()) continue;
      const std::string rule = s.settlement["rule"];
      const auto c = classes.classify(s.tool);
      if ((rule == "rerun_pure" && c != settlement::EffectClass::pure) ||
          (rule == "rerun_idempotent" && c != settlement::EffectClass::idempotent) ||
          (rule == "synthetic_unsafe" && c != settlement::EffectClass::unsafe)) {
        ++wrong_rules;
      }
    }
  }
  const int finished =
      f.sql("SELECT count(*) FROM live_runs WHERE status = 'finished'")[0][0].as<int>();
  std::printf(
      "chaos: seed %u, bots %d, runs %d (finished %d), steps %d, kills %d (%d armed restarts), "
      "zombies %d, effects %zu, duplicate effects %d, rules seen %zu/5\n",
      seed, bot_count, runs, finished, steps, kills, failpoint_restarts, zombies,
      effect_keys.size(), duplicates, rules.size());
  // Did the workload outlast the chaos? The first kill against the last run's end, and how many
  // runs were already over before anything was killed.
  const auto timing = f.sql(
      "SELECT extract(epoch FROM max(finished_at) - min(created_at)), "
      "count(*) FILTER (WHERE finished_at < min_created + make_interval(secs => " +
      std::to_string(first_kill_s.value_or(1e9)) +
      ")) FROM live_runs, (SELECT min(created_at) AS min_created FROM live_runs) m");
  std::printf(
      "chaos: first kill at %.1f s, chaos over at %.1f s, last run finished at %s s; "
      "%s of %d runs finished before the first kill\n",
      first_kill_s.value_or(-1), chaos_s, timing[0][0].is_null() ? "-" : timing[0][0].c_str(),
      timing[0][1].c_str(), runs);

  std::vector<double> resume_ms;
  for (const auto& bot : bots) {
    for (const auto& incarnation : bot.incarnations) {
      if (const auto ms = restart_to_resume_ms(incarnation)) resume_ms.push_back(*ms);
    }
  }
  std::sort(resume_ms.begin(), resume_ms.end());
  const auto at = [&](double fraction) {
    return resume_ms.empty()
               ? 0.0
               : resume_ms[std::min(
                     resume_ms.size() - 1,
                     static_cast<std::size_t>(fraction * static_cast<double>(resume_ms.size())))];
  };
  std::printf(
      "chaos: restart to runs resumed (spawn to the boot timeline's \"resumed\", %zu restarts "
      "that reclaimed runs): p50 %.0f ms, p99 %.0f ms, max %.0f ms\n",
      resume_ms.size(), at(0.5), at(0.99), resume_ms.empty() ? 0.0 : resume_ms.back());

  for (const auto& row : f.sql("SELECT status, count(*), min(result::text) FROM live_runs "
                               "GROUP BY status")) {
    std::printf("  runs %s: %s (e.g. %s)\n", row[0].c_str(), row[1].c_str(),
                row[2].is_null() ? "-" : row[2].c_str());
  }
  const bool all_rules = rules.size() == 5;
  work.keep = !(finished == runs && duplicates == 0 && bad_chains == 0 && stale_rows == 0 &&
                wrong_rules == 0 && kills >= kills_wanted && zombies >= zombies_wanted &&
                !resume_ms.empty() && all_rules);
  if (work.keep) std::printf("chaos: failed; the bots' logs are kept in %s\n", work.path.c_str());
  CHECK(finished == runs);
  CHECK(duplicates == 0);
  CHECK(bad_chains == 0);
  CHECK(stale_rows == 0);
  CHECK(wrong_rules == 0);
  CHECK(kills >= kills_wanted);
  CHECK(zombies >= zombies_wanted);
  CHECK(!resume_ms.empty());
  for (const char* rule : {"rerun_pure", "rerun_idempotent", "synthetic_unsafe",
                           "append_missing_result", "run_never_started"}) {
    CHECK(rules.contains(rule));
  }
}
