// `runledger bot` as real processes: killed (SIGKILL, by a failpoint) right after an unsafe
// effect, restarted under the same slot, the run continues without repeating the effect; and
// SIGTERM hands a run off and exits 0.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "tests/ledger/ledger_fixture.h"
#include "tests/support/child_process.h"
#include "transcript/transcript.h"

using namespace runledger;
using namespace runledger::testing;
using nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

pid_t spawn_bot(const std::string& url, const fs::path& work, const std::string& failpoints) {
  std::map<std::string, std::optional<std::string>> env = {{"DATABASE_URL", url}};
  env["RUNLEDGER_FAILPOINTS"] =
      failpoints.empty() ? std::nullopt : std::optional<std::string>(failpoints);
  return spawn(RUNLEDGER_BINARY, {"bot", "--slot", "bot-1", "--work-dir", work.string()}, env);
}

bool wait_for(const std::function<bool()>& condition, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return condition();
}

int count_lines(const fs::path& file) {
  std::ifstream in(file);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

struct Work {
  fs::path path = fs::temp_directory_path() / ("bot-process-" + random_uuid());
  ~Work() { fs::remove_all(path); }
};

json push_script(const std::string& command) {
  return {
      {"turns",
       {{{"text", "push"},
         {"calls",
          {{{"id", "push"},
            {"tool", "bash"},
            {"args", {{"command", command}}},
            {"if_restarted",
             {{{"id", "check"}, {"tool", "read_file"}, {"args", {{"path", "pushed.txt"}}}}}}}}}}}},
      {"result", {{"ok", true}}}};
}

}  // namespace

TEST_CASE("a bot killed right after an unsafe effect is restarted and never repeats it") {
  LedgerFixture f;
  Work work;
  auto r = request("kill-after-effect");
  r.profile = {{"script", push_script("echo pushed >> pushed.txt")}};
  const RunId run = f.ledger.dispatch(r).run.run_id;

  const pid_t first = spawn_bot(f.db.url(), work.path, "bot.after_effect=kill");
  CHECK(wait_exit(first) == 128 + SIGKILL);
  CHECK(f.ledger.get(run).status == ledger::RunStatus::running);  // the dead process's lease

  const pid_t second = spawn_bot(f.db.url(), work.path, "");
  const bool finished =
      wait_for([&] { return f.ledger.get(run).status == ledger::RunStatus::finished; }, 30s);
  kill(second, SIGTERM);
  CHECK(wait_exit(second) == 0);
  REQUIRE(finished);

  CHECK(count_lines(work.path / "effects.log") == 1);  // the push happened once
  const fs::path sandbox = work.path / "sandboxes" / run.value();
  CHECK(count_lines(sandbox / "pushed.txt") == 1);
  transcript::Store store(f.pool, f.ledger);
  const auto steps = store.steps(run);
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].state == transcript::StepState::settled);
  CHECK(steps[0].settlement["rule"] == "synthetic_unsafe");
  CHECK(steps[1].call_id == "check");
  CHECK(steps[1].state == transcript::StepState::done);  // the re-check found the effect
  CHECK(f.ledger.get(run).generation == Generation(2));  // taken over at boot, no lease wait
  CHECK(store.verify(run).ok);
}

TEST_CASE("SIGTERM hands a bot's run off at a safe point and the bot exits 0") {
  LedgerFixture f;
  Work work;
  auto r = request("handoff");
  json script = {{"turns", json::array()}, {"result", {{"ok", true}}}};
  for (int i = 0; i < 200; ++i) {
    script["turns"].push_back({{"text", "step"},
                               {"calls",
                                {{{"id", "s" + std::to_string(i)},
                                  {"tool", "bash"},
                                  {"args", {{"command", "sleep 0.05"}}}}}}});
  }
  r.profile = {{"script", script}};
  const RunId run = f.ledger.dispatch(r).run.run_id;
  const pid_t bot = spawn_bot(f.db.url(), work.path, "");
  transcript::Store store(f.pool, f.ledger);
  REQUIRE(wait_for([&] { return store.steps(run).size() >= 3; }, 30s));
  kill(bot, SIGTERM);
  CHECK(wait_exit(bot) == 0);
  const auto after = f.ledger.get(run);
  CHECK(after.status == ledger::RunStatus::queued);  // released: claimable at once
  for (const auto& step : store.steps(run)) CHECK(step.state == transcript::StepState::done);
}
