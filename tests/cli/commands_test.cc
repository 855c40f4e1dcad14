// Every command of the real `runledger` executable parses its arguments before doing anything:
// `--help` prints its usage and exits 0, an unknown flag or a malformed integer exits 2 naming
// it. The commands are read from `runledger --help`, which is written from the executable's
// command table, so a new command is covered without changing this test. Every run here points
// DATABASE_URL at a closed port: a command that connected before refusing would fail instead.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "ids/ids.h"

using namespace runledger;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr const char* kClosedDatabase = "postgresql://runledger@127.0.0.1:1/nothing";

struct Outcome {
  int code = -1;  // exit code, or 128 + signal
  std::string out;
  std::string err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A private empty working directory for the commands (nothing may appear in it) and one for
// their captured output.
struct Dirs {
  fs::path base = fs::temp_directory_path() / ("runledger-commands-" + random_uuid());
  fs::path work = base / "work";
  fs::path output = base / "output";
  Dirs() {
    fs::create_directories(work);
    fs::create_directories(output);
  }
  ~Dirs() {
    std::error_code ec;
    fs::remove_all(base, ec);
  }
};

// Runs `runledger args...` in `dirs.work` with DATABASE_URL on a closed port; kills it after 30 s
// (a command that started working instead of refusing).
Outcome run(const Dirs& dirs, const std::vector<std::string>& args) {
  const fs::path out = dirs.output / "stdout", err = dirs.output / "stderr";
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("DATABASE_URL", kClosedDatabase, 1);
    unsetenv("RUNLEDGER_FAILPOINTS");
    if (chdir(dirs.work.c_str()) != 0) _exit(126);
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    std::vector<std::string> storage = {"runledger"};
    storage.insert(storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(RUNLEDGER_BINARY, argv.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read_file(out),
          read_file(err)};
}

std::string shell_words(const std::vector<std::string>& args) {
  std::string line = "runledger";
  for (const auto& a : args) line += " '" + a + "'";
  return line;
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The commands `runledger --help` lists: an entry is a line indented by exactly two spaces; its
// command is the lower-case words before the first argument (upper case, or starting with `-`
// or `[`), e.g. {"runs", "cancel"} from "  runs cancel RUN_ID --by NAME".
std::vector<std::vector<std::string>> listed_commands(const std::string& usage) {
  std::vector<std::vector<std::string>> commands;
  std::istringstream in(usage);
  for (std::string line; std::getline(in, line);) {
    if (line.size() < 3 || !line.starts_with("  ") || line[2] == ' ') continue;
    // The synopsis ends where the summary begins (two spaces), if it is on the same line.
    const auto summary = line.find("  ", 2);
    std::vector<std::string> path;
    for (const auto& w :
         words(line.substr(2, summary == std::string::npos ? summary : summary - 2))) {
      if (w[0] < 'a' || w[0] > 'z' ||
          w.find_first_not_of("abcdefghijklmnopqrstuvwxyz-") != std::string::npos) {
        break;
      }
      path.push_back(w);
    }
    if (!path.empty()) commands.push_back(path);
  }
  return commands;
}

// Every integer option in a command's usage: the options whose help says "integer".
std::vector<std::string> integer_options(const std::string& usage) {
  std::vector<std::string> found;
  std::istringstream in(usage);
  std::string option, help;
  const auto flush = [&] {
    if (!option.empty() && help.find("integer") != std::string::npos) found.push_back(option);
    option.clear();
    help.clear();
  };
  bool in_options = false;
  for (std::string line; std::getline(in, line);) {
    if (line == "options:") {
      in_options = true;
      continue;
    }
    if (!in_options) continue;
    if (line.starts_with("  --")) {
      flush();
      option = words(line)[0];
      help = line;
    } else if (line.starts_with("   ")) {
      help += line;
    } else {
      flush();
    }
  }
  flush();
  return found;
}

std::string joined(const std::vector<std::string>& path) {
  std::string out;
  for (const auto& w : path) out += (out.empty() ? "" : " ") + w;
  return out;
}

}  // namespace

TEST_CASE("runledger and runledger --help print the usage listing every command") {
  Dirs dirs;
  const Outcome bare = run(dirs, {});
  CHECK(bare.code == 0);
  CHECK_THAT(bare.out, Catch::StartsWith("usage: runledger COMMAND"));
  for (const char* help : {"--help", "-h"}) {
    const Outcome o = run(dirs, {help});
    CHECK(o.code == 0);
    CHECK(o.out == bare.out);
    CHECK(o.err.empty());
  }
  // The listing parses into the commands we know of (more may come; none may go silently).
  std::set<std::string> listed;
  for (const auto& path : listed_commands(bare.out)) listed.insert(joined(path));
  for (const char* known : {"up",
                            "demo",
                            "service",
                            "migrate",
                            "dispatch",
                            "runs ls",
                            "runs show",
                            "runs cancel",
                            "sweep",
                            "bot",
                            "coordinator",
                            "instances create",
                            "instances ls",
                            "instances show",
                            "instances history",
                            "instances send-event",
                            "instances pause",
                            "instances resume",
                            "instances terminate",
                            "instances restart",
                            "ship",
                            "threads show",
                            "policy grant",
                            "policy revoke",
                            "merge-actor",
                            "token create",
                            "token list",
                            "token revoke",
                            "db-url"}) {
    INFO(known);
    CHECK(listed.contains(known));
  }

  // An unknown command: named, with the usage, on stderr.
  for (const char* unknown : {"bogus", "--bogus-flag"}) {
    const Outcome o = run(dirs, {unknown});
    CHECK(o.code == 2);
    CHECK(o.out.empty());
    CHECK_THAT(o.err, Catch::Contains(std::string("unknown command '") + unknown + "'"));
    CHECK_THAT(o.err, Catch::Contains(bare.out));
  }
}

TEST_CASE("every command prints its usage on --help and refuses a bogus flag, before anything") {
  Dirs dirs;
  const auto commands = listed_commands(run(dirs, {"--help"}).out);
  REQUIRE(commands.size() >= 26);
  std::set<std::string> groups;
  for (const auto& path : commands) {
    const std::string name = "runledger " + joined(path);
    if (path.size() > 1) groups.insert(path[0]);
    for (const char* help : {"--help", "-h"}) {
      std::vector<std::string> args = path;
      args.push_back(help);
      INFO(shell_words(args));
      const Outcome o = run(dirs, args);
      CHECK(o.code == 0);
      CHECK_THAT(o.out, Catch::StartsWith("usage: " + name));
      CHECK_THAT(o.out, Catch::Contains("-h, --help"));
      CHECK(o.err.empty());
    }
    std::vector<std::string> args = path;
    args.push_back("--bogus-flag");
    INFO(shell_words(args));
    const Outcome o = run(dirs, args);
    CHECK(o.code == 2);
    CHECK(o.out.empty());
    CHECK_THAT(o.err, Catch::Contains(name + ": invalid_argument: unknown option '--bogus-flag'"));
  }
  // The groups: their usage lists their commands, a bogus flag is refused.
  for (const auto& group : groups) {
    INFO("runledger " << group);
    const Outcome help = run(dirs, {group, "--help"});
    CHECK(help.code == 0);
    CHECK_THAT(help.out, Catch::StartsWith("usage: runledger " + group + " COMMAND"));
    for (const auto& path : commands) {
      if (path[0] == group) CHECK_THAT(help.out, Catch::Contains("\n  " + path[1]));
    }
    const Outcome bogus = run(dirs, {group, "--bogus-flag"});
    CHECK(bogus.code == 2);
    CHECK_THAT(bogus.err, Catch::Contains("'--bogus-flag'"));
  }
  // Nothing happened: no file appeared where the commands ran (`up` would have made its
  // cluster's directory, `bot` its work directory).
  CHECK(fs::is_empty(dirs.work));
}

TEST_CASE("every integer option of every command refuses a malformed integer, naming it") {
  Dirs dirs;
  int checked = 0;
  for (const auto& path : listed_commands(run(dirs, {"--help"}).out)) {
    std::vector<std::string> help_args = path;
    help_args.push_back("--help");
    for (const auto& option : integer_options(run(dirs, help_args).out)) {
      for (const std::string& bad :
           std::vector<std::string>{"10abc", "-1", "99999999999999999999", ""}) {
        std::vector<std::string> args = path;
        args.push_back(option);
        args.push_back(bad);
        INFO(shell_words(args));
        const Outcome o = run(dirs, args);
        CHECK(o.code == 2);
        CHECK_THAT(o.err,
                   Catch::Contains(option + " must be a positive integer, got '" + bad + "'"));
      }
      ++checked;
    }
  }
  // service 2, dispatch 2, runs ls 1, bot 3, coordinator 5, instances ls 1, merge-actor 1.
  CHECK(checked >= 15);
}

TEST_CASE("refusals and usage come before the database: a command that connects would fail") {
  Dirs dirs;
  // The environment really is unusable: a command that gets as far as connecting fails.
  const Outcome migrate = run(dirs, {"migrate"});
  CHECK(migrate.code != 0);
  CHECK(migrate.code != 2);
  CHECK_THAT(migrate.err, Catch::Contains("127.0.0.1"));

  const Outcome help = run(dirs, {"migrate", "--help"});
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::StartsWith("usage: runledger migrate"));
  CHECK_FALSE(help.out.find("up to date") != std::string::npos);

  const Outcome sweep = run(dirs, {"sweep", "--bogus-flag"});
  CHECK(sweep.code == 2);
  CHECK_THAT(sweep.err, Catch::Contains("--bogus-flag"));
  CHECK_FALSE(sweep.err.find("127.0.0.1") != std::string::npos);
  CHECK(sweep.out.empty());

  // Refusals that used to come after connecting, or not at all.
  const std::map<std::vector<std::string>, std::string> refused = {
      {{"service", "--sweep-interval", "10abc"}, "--sweep-interval"},
      {{"runs", "show", "a", "b"}, "'b'"},
      {{"runs", "cancel", "x"}, "--by is required"},
      {{"bot", "--work-dir", "w"}, "--slot is required"},
      {{"coordinator", "--ship-repo", "r"}, "--ship-repo needs --deploy-root"},
      {{"coordinator", "--merge-poll-ms", "5"}, "--merge-poll-ms needs --ship-repo"},
      {{"dispatch", "--key", "k", "--thread", "t"}, "--requester is required"},
      {{"ship", "--thread", "t", "--message", "m", "--requester", "r"}, "missing REQUEST"},
      {{"ship", "--thread", "t", "--message", "m", "--requester", "r", "a", "b"}, "'b'"},
      {{"policy", "grant", "--requester", "u"}, "--capability is required"},
      {{"threads", "show"}, "missing THREAD"},
      {{"instances"}, "missing a command"},
      {{"instances", "terminate", "i", "--by", "me", "--rollback=yes"}, "--rollback"},
      {{"demo"}, "--root is required"},
      {{"token", "create", "--scope", "admin", "--name", "n"}, "unknown scope 'admin'"},
      {{"token", "revoke"}, "missing NAME"},
      {{"up", "--root"}, "--root needs a value"},
      {{"merge-actor", "--ship-repo", "r", "--delay-ms", "1.5"}, "--delay-ms"},
  };
  for (const auto& [args, says] : refused) {
    INFO(shell_words(args));
    const Outcome o = run(dirs, args);
    CHECK(o.code == 2);
    CHECK_THAT(o.err, Catch::Contains(says));
    CHECK_FALSE(o.err.find("127.0.0.1") != std::string::npos);
  }
  CHECK(fs::is_empty(dirs.work));
}
