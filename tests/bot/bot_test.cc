// The reference bot: a scripted run goes end to end, and a run whose process died with an unsafe
// call in flight resumes with the synthetic result, re-checks, and never repeats the call.
#include <fstream>
#include <future>
#include <optional>
#include <thread>

#include "bot/bot.h"
#include "failpoint/failpoint.h"
#include "tests/ledger/ledger_fixture.h"
#include "tests/support/waiting.h"

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
  auto driver = std::make_shared<bot::ScriptedDriver>(
      tools::ToolsOptions{dir.path / "sandboxes", dir.path / "effects.log"});
  boot::Process process(f.db.url(), {}, {}, bot::reference_effect_classes(), bot_options(), driver);
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

// Invariant 3, "write-ahead", as the bot keeps it: when a tool starts, the turn that asked for
// it and its intent are already recorded.
TEST_CASE("a bot's tool starts only after its turn and its intent are recorded") {
  LedgerFixture f;
  TempDir dir;
  auto r = request("write-ahead");
  r.profile = {{"script", script()}};
  const RunId run = f.ledger.dispatch(r).run.run_id;
  failpoint::arm("bot.after_intent", failpoint::Action::pause);  // between c1's intent and bash
  auto driver = std::make_shared<bot::ScriptedDriver>(
      tools::ToolsOptions{dir.path / "sandboxes", dir.path / "effects.log"});
  boot::Process process(f.db.url(), {}, {}, bot::reference_effect_classes(), bot_options(), driver);
  process.boot();
  auto running = std::async(std::launch::async, [&] { process.run(); });
  struct Stop {
    boot::Process& process;
    std::future<void>& running;
    ~Stop() {
      failpoint::release("bot.after_intent");
      process.request_stop();
      running.get();
    }
  } stop{process, running};
  REQUIRE(failpoint::wait_until_paused("bot.after_intent", 10s));

  transcript::Store store(f.pool, f.ledger);
  const auto steps = store.steps(run);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].call_id == "c1");
  CHECK(steps[0].state == transcript::StepState::intent);
  const auto turn = store.last_entry(run, transcript::EntryKind::assistant);
  REQUIRE(turn.has_value());
  CHECK(json::parse(turn->body)["calls"][0]["id"] == "c1");
  CHECK(lines(dir.path / "effects.log").empty());  // bash has not started
  CHECK_FALSE(std::filesystem::exists(dir.path / "sandboxes" / run.value() / "pushed.txt"));

  failpoint::release("bot.after_intent");
  CHECK(wait_for([&] { return f.ledger.get(run).status == ledger::RunStatus::finished; }, 20s));
  CHECK(lines(dir.path / "effects.log").size() == 1);  // and then it ran, once
}

namespace {

// A run whose first tool waits inside its sandbox until the test says go (after announcing it is
// inside), so that the test can stand in the way of the writes that follow it.
json gated_script() {
  return {
      {"turns",
       {{{"text", "work"},
         {"calls",
          {{{"id", "c1"},
            {"tool", "bash"},
            {"args",
             {{"command", "touch inside; while [ ! -e go ]; do sleep 0.01; done; echo done"}}}}}}},
        {{"text", "write and read"},
         {"calls",
          {{{"id", "c2"}, {"tool", "write_file"}, {"args", {{"path", "a.txt"}, {"content", "ok"}}}},
           {{"id", "c3"}, {"tool", "read_file"}, {"args", {{"path", "a.txt"}}}}}}}}},
      {"result", {{"ok", true}}}};
}

// A bot process on the fixture's database, running until the scope ends.
struct RunningBot {
  RunningBot(LedgerFixture& f, const TempDir& dir, std::chrono::milliseconds lock_timeout)
      : driver(std::make_shared<bot::ScriptedDriver>(
            tools::ToolsOptions{dir.path / "sandboxes", dir.path / "effects.log"})),
        process(f.db.url(), {}, {}, bot::reference_effect_classes(), options(lock_timeout),
                driver) {
    process.boot();
    running = std::async(std::launch::async, [this] { process.run(); });
  }
  ~RunningBot() {
    process.request_stop();
    running.get();
  }
  static boot::Options options(std::chrono::milliseconds lock_timeout) {
    auto o = bot_options();
    o.lock_timeout = lock_timeout;
    return o;
  }
  std::shared_ptr<bot::ScriptedDriver> driver;
  boot::Process process;
  std::future<void> running;
};

RunId dispatch_gated(LedgerFixture& f, const std::string& key) {
  auto r = request(key);
  r.profile = {{"script", gated_script()}};
  return f.ledger.dispatch(r).run.run_id;
}

std::vector<std::pair<std::string, std::string>> transcript_of(LedgerFixture& f, const RunId& run) {
  transcript::Store store(f.pool, f.ledger);
  std::vector<std::pair<std::string, std::string>> out;
  store.read(run, 1, [&](const transcript::Entry& e) {
    out.emplace_back(std::string(transcript::to_string(e.kind)), e.body);
  });
  return out;
}

// The run ended as an undisturbed one does: finished with the script's result, every step done
// once (nothing settled, the unsafe call run once), the same transcript bytes, a verified chain.
void check_undisturbed(LedgerFixture& f, const TempDir& dir, const RunId& run,
                       const RunId& reference) {
  CHECK(f.ledger.get(run).status == ledger::RunStatus::finished);
  CHECK(f.ledger.get(run).result == json{{"ok", true}});
  CHECK(f.ledger.get(run).generation == Generation(1));  // never left to its lease
  transcript::Store store(f.pool, f.ledger);
  const auto steps = store.steps(run);
  REQUIRE(steps.size() == 3);
  for (const auto& s : steps) CHECK(s.state == transcript::StepState::done);
  CHECK(transcript_of(f, run) == transcript_of(f, reference));
  CHECK(store.verify(run).ok);
  int effects_of_run = 0;
  for (const auto& line : lines(dir.path / "effects.log")) {
    effects_of_run += line.rfind(run.value() + "/", 0) == 0;
  }
  CHECK(effects_of_run == 1);
}

RunId run_reference(LedgerFixture& f, const TempDir& dir) {
  const RunId reference = dispatch_gated(f, "reference");
  std::filesystem::create_directories(dir.path / "sandboxes" / reference.value());
  std::ofstream(dir.path / "sandboxes" / reference.value() / "go").put('\n');
  run_bot_until_done(f, reference, dir);
  REQUIRE(f.ledger.get(reference).status == ledger::RunStatus::finished);
  return reference;
}

// A gated run (and its undisturbed reference, run first) on a running bot, whose tool is inside
// and waiting for go().
struct InsideTheTool {
  InsideTheTool(const std::string& key, std::chrono::milliseconds lock_timeout)
      : reference(run_reference(f, dir)),
        run(dispatch_gated(f, key)),
        sandbox(dir.path / "sandboxes" / run.value()) {
    bot.emplace(f, dir, lock_timeout);
    REQUIRE(wait_for([&] { return std::filesystem::exists(sandbox / "inside"); }, 10s));
  }
  void go() { std::ofstream(sandbox / "go").put('\n'); }
  // Waits for the run's end, stops the bot, and checks the run against the reference.
  void ends_undisturbed() {
    REQUIRE(wait_for([&] { return ledger::is_terminal(f.ledger.get(run).status); }, 20s));
    bot.reset();
    check_undisturbed(f, dir, run, reference);
  }
  std::string run_row() const { return "live_runs WHERE run_id = '" + run.value() + "'"; }

  LedgerFixture f;
  TempDir dir;
  RunId reference;
  RunId run;
  std::filesystem::path sandbox;
  std::optional<RunningBot> bot;
};

}  // namespace

TEST_CASE("a bot's write that meets a lock timeout is repeated, and the run ends undisturbed") {
  InsideTheTool t("blocked", 300ms);
  // Another session holds the run row while the tool's completion wants it FOR SHARE.
  pqxx::connection other(t.f.db.url());
  pqxx::work hold(other);
  hold.exec("SELECT 1 FROM " + t.run_row() + " FOR UPDATE");
  t.go();
  REQUIRE(wait_for([&] { return lock_waiters(t.f.db.url()) > 0; }, 10s));
  REQUIRE(wait_for([&] { return lock_waiters(t.f.db.url()) == 0; }, 10s));  // lock_timeout
  hold.commit();
  t.ends_undisturbed();
}

TEST_CASE("a bot's write chosen as a deadlock's victim is repeated, and the run ends undisturbed") {
  InsideTheTool t("deadlocked", 5s);  // lock_timeout past deadlock_timeout (1 s)
  // The other session locks the step's row first; the completion takes the run row FOR SHARE
  // and waits for the step row; then the other session wants the run row: a cycle, whose
  // victim is the completion (it waited first, so its deadlock check runs first).
  pqxx::connection other(t.f.db.url());
  pqxx::work cross(other);
  cross.exec("SELECT 1 FROM run_steps WHERE run_id = '" + t.run.value() +
             "' AND step_no = 1 FOR UPDATE");
  t.go();
  REQUIRE(wait_for([&] { return lock_waiters(t.f.db.url()) > 0; }, 10s));
  cross.exec("SELECT 1 FROM " + t.run_row() + " FOR UPDATE");
  cross.abort();
  t.ends_undisturbed();
}
