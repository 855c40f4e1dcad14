// The reference bot's tools: each tool's round trip in a fresh sandbox, path escapes refused,
// the fencing token in a child's environment, and one effects-log line per unsafe call, written
// before the effect.
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include <catch2/catch.hpp>

#include "ids/ids.h"
#include "tools/tools.h"

using namespace runledger;
using transcript::StepOutcome;
using transcript::StepState;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "runledger-bot-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int count_lines(const fs::path& file) {
  const std::string text = slurp(file);
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

std::string quoted(const fs::path& p) {
  return "'" + p.string() + "'";
}

void sh(const std::string& command) {
  INFO(command);
  REQUIRE(std::system((command + " >/dev/null 2>&1").c_str()) == 0);
}

// The stdout of a shell command that must succeed.
std::string capture(const std::string& command) {
  INFO(command);
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  REQUIRE(::pclose(pipe) == 0);
  return out;
}

struct Fixture {
  TempDir tmp;
  tools::Tools toolbox{tools::ToolsOptions{tmp.path / "sandboxes", tmp.path / "effects.log"}};
  RunId run = RunId::parse(random_uuid());
  settlement::ToolContext context{run, Generation(7), run.value() + "/1"};

  fs::path sandbox() const { return tmp.path / "sandboxes" / run.value(); }
  fs::path effects_log() const { return tmp.path / "effects.log"; }

  StepOutcome call(const std::string& tool, nlohmann::json args) {
    return toolbox.run({"call-1", tool, std::move(args)}, context);
  }
};

}  // namespace

TEST_CASE("write_file then read_file returns the exact bytes, logging no effect") {
  Fixture f;
  const std::string bytes("a\0b\nc\xff\0", 7);
  const auto wrote = f.call("write_file", {{"path", "dir/sub/file.bin"}, {"content", bytes}});
  REQUIRE(wrote.state == StepState::done);
  CHECK(wrote.result == "wrote 7 bytes");
  CHECK(slurp(f.sandbox() / "dir/sub/file.bin") == bytes);

  const auto read = f.call("read_file", {{"path", "dir/sub/file.bin"}});
  REQUIRE(read.state == StepState::done);
  CHECK(read.result == bytes);

  // Idempotent: the same write again leaves the same bytes.
  REQUIRE(f.call("write_file", {{"path", "dir/sub/file.bin"}, {"content", bytes}}).state ==
          StepState::done);
  CHECK(slurp(f.sandbox() / "dir/sub/file.bin") == bytes);
  CHECK(count_lines(f.effects_log()) == 0);
}

TEST_CASE("read_file of an absent file is a failure") {
  Fixture f;
  const auto read = f.call("read_file", {{"path", "nope.txt"}});
  CHECK(read.state == StepState::failed);
  CHECK(read.error.find("nope.txt") != std::string::npos);
}

TEST_CASE("paths leaving the sandbox are refused and nothing is touched") {
  Fixture f;
  const fs::path outside = f.tmp.path / "outside";
  fs::create_directories(outside);
  fs::create_directories(f.sandbox());
  fs::create_directory_symlink(outside, f.sandbox() / "link");
  std::ofstream(outside / "secret") << "secret";

  for (const std::string& path :
       std::vector<std::string>{"/etc/passwd", (outside / "x").string(), "../outside/x",
                                "a/../../outside/x", "a/../b", "..", "link/x", "link/secret", ""}) {
    INFO(path);
    const auto wrote = f.call("write_file", {{"path", path}, {"content", "x"}});
    CHECK(wrote.state == StepState::failed);
    const auto read = f.call("read_file", {{"path", path}});
    CHECK(read.state == StepState::failed);
    CHECK(read.result.empty());
  }
  CHECK(!fs::exists(outside / "x"));
  CHECK(!fs::exists(f.sandbox() / "a"));
  CHECK(!fs::exists(f.sandbox() / "b"));
  CHECK(slurp(outside / "secret") == "secret");
}

TEST_CASE("missing or ill-typed arguments and unknown tools are failures, not exceptions") {
  Fixture f;
  const auto unknown = f.call("rm_rf", nlohmann::json::object());
  CHECK(unknown.state == StepState::failed);
  CHECK(unknown.error.find("unknown tool") != std::string::npos);

  for (const auto& [tool, args] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"read_file", nlohmann::json::object()},
           {"read_file", {{"path", 3}}},
           {"read_file", nlohmann::json::array({"x"})},
           {"read_file", nullptr},
           {"write_file", {{"path", "x"}}},
           {"write_file", {{"path", "x"}, {"content", false}}},
           {"bash", nlohmann::json::object()},
           {"bash", {{"command", 5}}},
           {"git_push", {{"remote", "origin"}}},
           {"git_push", {{"remote", "--receive-pack=evil"}, {"branch", "main"}}},
           {"git_push", {{"remote", "origin"}, {"branch", ""}}},
       }) {
    INFO(tool << " " << args.dump());
    const auto outcome = f.call(tool, args);
    CHECK(outcome.state == StepState::failed);
    CHECK(!outcome.error.empty());
  }
  CHECK(!fs::exists(f.sandbox() / "x"));
  CHECK(count_lines(f.effects_log()) == 0);  // refused before any effect
}

TEST_CASE("bash sees the fencing token and runs in the sandbox, and a non-zero exit is a failure") {
  Fixture f;
  ::setenv("RUNLEDGER_GENERATION", "999", 1);  // an inherited value is replaced
  ::setenv("RUNLEDGER_BOT_TEST_INHERITED", "yes", 1);
  const auto env = f.call("bash", {{"command",
                                    "echo $RUNLEDGER_EFFECT_KEY $RUNLEDGER_GENERATION "
                                    "$RUNLEDGER_RUN_ID $RUNLEDGER_BOT_TEST_INHERITED; pwd"}});
  ::unsetenv("RUNLEDGER_GENERATION");
  ::unsetenv("RUNLEDGER_BOT_TEST_INHERITED");
  REQUIRE(env.state == StepState::done);
  CHECK(env.result == f.run.value() + "/1 7 " + f.run.value() + " yes\n" +
                          fs::canonical(f.sandbox()).string() + "\n");

  const auto failed = f.call("bash", {{"command", "echo out; echo err >&2; exit 3"}});
  CHECK(failed.state == StepState::failed);
  CHECK(failed.error == "exit 3: out\nerr\n");

  const auto killed = f.call("bash", {{"command", "kill -9 $$"}});
  CHECK(killed.state == StepState::failed);
  CHECK(killed.error.rfind("signal 9: ", 0) == 0);

  // Files a command writes are in the sandbox, where read_file finds them.
  REQUIRE(f.call("bash", {{"command", "printf 'made by sh' > made.txt"}}).state == StepState::done);
  CHECK(f.call("read_file", {{"path", "made.txt"}}).result == "made by sh");
}

TEST_CASE("bash appends exactly one effects-log line per call, before acting") {
  Fixture f;
  REQUIRE(f.call("bash", {{"command", "wc -l < " + quoted(f.effects_log())}}).result == "1\n");
  REQUIRE(f.call("bash", {{"command", "true"}}).state == StepState::done);
  REQUIRE(f.call("bash", {{"command", "false"}}).state == StepState::failed);
  CHECK(count_lines(f.effects_log()) == 3);
  const std::string line = f.run.value() + "/1 bash 7\n";
  CHECK(slurp(f.effects_log()) == line + line + line);
}

TEST_CASE("an unsafe tool whose effects-log line cannot be written does not run") {
  TempDir tmp;
  tools::Tools toolbox(
      tools::ToolsOptions{tmp.path / "sandboxes", tmp.path / "missing/effects.log"});
  const RunId run = RunId::parse(random_uuid());
  const auto outcome = toolbox.run({"c", "bash", {{"command", "touch ran"}}},
                                   {run, Generation(1), run.value() + "/1"});
  CHECK(outcome.state == StepState::failed);
  CHECK(!fs::exists(tmp.path / "sandboxes" / run.value() / "ran"));
}

TEST_CASE("bash output is capped at 1 MiB, and a lingering background process does not block") {
  Fixture f;
  const auto big = f.call("bash", {{"command", "head -c 3000000 /dev/zero"}});
  REQUIRE(big.state == StepState::done);
  CHECK(big.result.size() > (1u << 20));
  CHECK(big.result.size() < (1u << 20) + 100);
  CHECK(big.result.find("truncated") != std::string::npos);

  const auto start = std::chrono::steady_clock::now();
  const auto bg = f.call("bash", {{"command", "sleep 5 & echo started"}});
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  CHECK(bg.state == StepState::done);
  CHECK(bg.result == "started\n");
}

TEST_CASE("git_push lands the branch in a bare repository, and every push logs a line") {
  Fixture f;
  const fs::path bare = f.tmp.path / "remote.git";
  sh("git init -q --bare " + quoted(bare));
  fs::create_directories(f.sandbox());
  const std::string git = "git -C " + quoted(f.sandbox()) + " ";
  sh(git + "init -q -b main");
  sh(git + "config user.name 'Runledger Test'");
  sh(git + "config user.email test@example.invalid");
  REQUIRE(f.call("write_file", {{"path", "README"}, {"content", "hello\n"}}).state ==
          StepState::done);
  sh(git + "add README");
  sh(git + "commit -q -m first");

  const auto pushed = f.call("git_push", {{"remote", bare.string()}, {"branch", "main"}});
  INFO(pushed.error);
  REQUIRE(pushed.state == StepState::done);
  CHECK(count_lines(f.effects_log()) == 1);
  CHECK(slurp(f.effects_log()) == f.run.value() + "/1 git_push 7\n");

  const std::string landed = capture("git --git-dir=" + quoted(bare) + " rev-parse main");
  CHECK(landed.size() == 41);
  CHECK(landed == capture(git + "rev-parse HEAD"));

  // The same push again succeeds (nothing to do) but is still logged: duplicates are countable.
  const auto again = f.call("git_push", {{"remote", bare.string()}, {"branch", "main"}});
  CHECK(again.state == StepState::done);
  CHECK(count_lines(f.effects_log()) == 2);

  const auto missing = f.call("git_push", {{"remote", bare.string()}, {"branch", "no-such"}});
  CHECK(missing.state == StepState::failed);
  CHECK(missing.error.rfind("exit ", 0) == 0);
  CHECK(count_lines(f.effects_log()) == 3);
}
