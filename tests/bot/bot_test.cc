// The reference bot: a scripted run goes end to end, and a run whose process died with an unsafe
// call in flight resumes with the synthetic result, re-checks, and never repeats the call.
#include <fstream>
#include <future>
#include <thread>

#include "bot/bot.h"
#include "tests/ledger/ledger_fixture.h"

using namespace runledger;
using namespace runledger::testing;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

struct TempDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("bot-test-" + random_uuid());
  TempDir() { std::filesystem::create_directories(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
};

std::vector<std::string> lines(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

json script() {
  return {
      {"vars", {{"branch", "fix-1"}}},
      {"turns",
       {{{"text", "write it"},
         {"calls",
          {{{"id", "c1"},
            {"tool", "bash"},
            {"args", {{"command", "echo pushed ${branch} > pushed.txt"}}},
            {"if_restarted",
             {{{"id", "c1-check"}, {"tool", "read_file"}, {"args", {{"path", "pushed.txt"}}}}}}}}}},
        {{"text", "write and read"},
         {"calls",
          {{{"id", "c2"},
            {"tool", "write_file"},
            {"args", {{"path", "a.txt"}, {"content", "run ${run_id}"}}}},
           {{"id", "c3"}, {"tool", "read_file"}, {"args", {{"path", "a.txt"}}}}}}}}},
      {"result", {{"branch", "${branch}"}}}};
}

boot::Options bot_options() {
  boot::Options o;
  o.slot = SlotName("bot-1");
  o.capacity = 4;
  o.pool_size = 3;
  o.poll_interval = 50ms;
  o.handoff_grace = 2s;
  return o;
}

// Runs a bot process on the fixture's database until `run` has ended.
void run_bot_until_done(LedgerFixture& f, const RunId& run, const TempDir& dir) {
  bot::ScriptedDriver driver({dir.path / "sandboxes", dir.path / "effects.log"});
  boot::Process process(f.db.url(), {}, {}, bot::reference_effect_classes(), bot_options(), driver);
  driver.attach(process);
  process.boot();
  auto running = std::async(std::launch::async, [&] { process.run(); });
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!ledger::is_terminal(f.ledger.get(run).status) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  process.request_stop();
  running.get();
}

}  // namespace

TEST_CASE("a scripted run goes end to end: tools run in its sandbox and the result is recorded") {
  LedgerFixture f;
  TempDir dir;
  auto r = request("scripted");
  r.profile = {{"script", script()}};
  const RunId run = f.ledger.dispatch(r).run.run_id;
  run_bot_until_done(f, run, dir);

  const auto after = f.ledger.get(run);
  CHECK(after.status == ledger::RunStatus::finished);
  CHECK(after.result == json{{"branch", "fix-1"}});
  transcript::Store store(f.pool, f.ledger);
  const auto steps = store.steps(run);
  REQUIRE(steps.size() == 3);
  for (const auto& s : steps) CHECK(s.state == transcript::StepState::done);
  CHECK(*steps[2].result == "run " + run.value());
  CHECK(store.count_entries(run, transcript::EntryKind::assistant) == 3);  // 2 turns + final
  CHECK(store.count_entries(run, transcript::EntryKind::tool_result) == 3);
  CHECK(store.verify(run).ok);
  const auto effects = lines(dir.path / "effects.log");
  REQUIRE(effects.size() == 1);  // the one unsafe call
  CHECK(effects[0].rfind(run.value() + "/1 bash", 0) == 0);
}

TEST_CASE("a run whose unsafe call was in flight resumes, re-checks, and never repeats it") {
  LedgerFixture f;
  TempDir dir;
  auto r = request("crashed");
  r.profile = {{"script", script()}};
  const RunId run = f.ledger.dispatch(r).run.run_id;
  // The dead predecessor (slot bot-1, another incarnation) wrote turn 0 and the bash intent, then
  // died: whether the command ran is unknown.
  const auto dead = f.ledger.claim(make_owner("bot-1"), run);
  transcript::Store store(f.pool, f.ledger);
  const json c1 = {
      {"id", "c1"}, {"tool", "bash"}, {"args", {{"command", "echo pushed fix-1 > pushed.txt"}}}};
  store.append(
      run, dead.run.generation, transcript::EntryKind::assistant,
      json{{"script_turn", 0}, {"recheck", false}, {"text", "write it"}, {"calls", {c1}}}.dump());
  store.begin_step(run, dead.run.generation, {StepNo(1), "bash", "c1", c1["args"]});

  run_bot_until_done(f, run, dir);

  CHECK(f.ledger.get(run).status == ledger::RunStatus::finished);
  const auto steps = store.steps(run);
  REQUIRE(steps.size() == 4);
  CHECK(steps[0].call_id == "c1");
  CHECK(steps[0].state == transcript::StepState::settled);  // not run again
  CHECK(steps[1].call_id == "c1-check");                    // the model re-checked
  CHECK(steps[1].state == transcript::StepState::failed);   // nothing was pushed: it never ran
  CHECK(steps[2].call_id == "c2");
  CHECK(lines(dir.path / "effects.log").empty());  // c1 never ran, in any generation
  CHECK(store.verify(run).ok);
}
