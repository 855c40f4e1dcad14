// `runledger token create | list | revoke` as a real process against a fresh database: what each
// prints and how it exits.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "errors/errors.h"
#include "ids/ids.h"
#include "tests/support/child_process.h"
#include "tests/support/test_database.h"
#include "tokens/tokens.h"

using namespace runledger;
namespace fs = std::filesystem;

namespace {

using Environment = std::map<std::string, std::optional<std::string>>;

struct Outcome {
  int code = -1;
  std::string out;
  std::string err;
};

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("runledger-token-" + random_uuid());
  Scratch() { fs::create_directories(dir); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

std::string contents(const fs::path& file) {
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// `runledger args...` to its end, with `env` on top of the test's environment.
Outcome run_command(const Scratch& scratch, const std::vector<std::string>& args,
                    const Environment& env) {
  const fs::path out = scratch.dir / "stdout", err = scratch.dir / "stderr";
  const int code =
      testing::wait_exit(testing::spawn(RUNLEDGER_BINARY, args, env, out.string(), err.string()));
  return {code, contents(out), contents(err)};
}

std::vector<std::string> lines(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The token a successful `token create` printed: its last line.
std::string printed_token(const Outcome& created) {
  const auto printed = lines(created.out);
  return printed.empty() ? "" : printed.back();
}

}  // namespace

TEST_CASE("token create prints the token alone on its last line, and the token authenticates") {
  testing::TestDatabase db;
  Scratch scratch;
  const Environment env = {{"DATABASE_URL", db.url()}};
  const Outcome created = run_command(
      scratch, {"token", "create", "--scope", "bot", "--name", "fleet", "--slots", "bot-*"}, env);
  INFO(created.err);
  REQUIRE(created.code == 0);
  const std::string token = printed_token(created);
  CHECK(token.starts_with("rl_"));
  CHECK(token.size() == 46);
  CHECK(created.out.find(token) == created.out.rfind(token));  // printed once

  pg::Pool pool(db.pool_options(2));
  tokens::Tokens tokens(pool);
  const auto info = tokens.authenticate(token);
  CHECK(info.name == "fleet");
  CHECK(info.scope == tokens::Scope::bot);
  CHECK(info.slots == "bot-*");

  // A second live token of the name is a conflict (exit 4).
  const Outcome again =
      run_command(scratch, {"token", "create", "--scope", "operator", "--name", "fleet"}, env);
  CHECK(again.code == 4);
  CHECK_THAT(again.err, Catch::Contains("fleet"));
}

TEST_CASE("token list prints one JSON object a token, newest first, never a secret") {
  testing::TestDatabase db;
  Scratch scratch;
  const Environment env = {{"DATABASE_URL", db.url()}};
  std::vector<std::string> secrets;
  for (const char* name : {"alice", "ci"}) {
    const Outcome created =
        run_command(scratch, {"token", "create", "--scope", "operator", "--name", name}, env);
    REQUIRE(created.code == 0);
    secrets.push_back(printed_token(created));
    db.advance_clock(std::chrono::milliseconds(1));
  }
  const Outcome listed = run_command(scratch, {"token", "list"}, env);
  REQUIRE(listed.code == 0);
  const auto printed = lines(listed.out);
  REQUIRE(printed.size() == 2);
  CHECK(nlohmann::json::parse(printed[0])["name"] == "ci");
  CHECK(nlohmann::json::parse(printed[1])["name"] == "alice");
  CHECK(nlohmann::json::parse(printed[1])["scope"] == "operator");
  for (const auto& secret : secrets) {
    CHECK(listed.out.find(secret.substr(3)) == std::string::npos);
  }
}

TEST_CASE(
    "token revoke exits 0 and the token is refused, and exits 3 for a name without a live token") {
  testing::TestDatabase db;
  Scratch scratch;
  const Environment env = {{"DATABASE_URL", db.url()}};
  const Outcome created =
      run_command(scratch, {"token", "create", "--scope", "coordinator", "--name", "coord"}, env);
  REQUIRE(created.code == 0);

  const Outcome revoked = run_command(scratch, {"token", "revoke", "coord"}, env);
  CHECK(revoked.code == 0);
  CHECK_FALSE(nlohmann::json::parse(revoked.out)["revoked_at"].is_null());
  pg::Pool pool(db.pool_options(2));
  tokens::Tokens tokens(pool);
  CHECK_THROWS_AS(tokens.authenticate(printed_token(created)), Unauthenticated);

  for (const char* name : {"coord", "nobody"}) {
    INFO(name);
    const Outcome missing = run_command(scratch, {"token", "revoke", name}, env);
    CHECK(missing.code == 3);
    CHECK_THAT(missing.err, Catch::Contains("not_found"));
  }
}

TEST_CASE("token create refuses a bad scope, name or slots with exit 2, before connecting") {
  Scratch scratch;
  const Environment closed = {{"DATABASE_URL", "postgresql://runledger@127.0.0.1:1/nothing"}};
  const std::vector<std::vector<std::string>> refused = {
      {"token", "create", "--scope", "admin", "--name", "n"},
      {"token", "create", "--scope", "coordinator", "--name", "n", "--slots", "bot-*"},
      {"token", "create", "--scope", "bot", "--name", "n", "--slots", ""},
      {"token", "create", "--scope", "bot", "--name", "bad\tname"},
      {"token", "create", "--name", "n"},
  };
  for (const auto& args : refused) {
    std::string line;
    for (const auto& a : args) line += " '" + a + "'";
    INFO("runledger" << line);
    const Outcome o = run_command(scratch, args, closed);
    CHECK(o.code == 2);
    CHECK(o.out.empty());
    CHECK(o.err.find("127.0.0.1") == std::string::npos);
  }
  const Outcome scope = run_command(scratch, refused[0], closed);
  CHECK_THAT(scope.err, Catch::Contains("unknown scope 'admin'"));
}

TEST_CASE("without DATABASE_URL the token commands use --root DIR's database_url") {
  testing::TestDatabase db;
  Scratch scratch;
  const fs::path root = scratch.dir / "root";
  fs::create_directories(root);
  const Environment env = {{"DATABASE_URL", std::nullopt}};

  const Outcome before = run_command(scratch, {"token", "list", "--root", root.string()}, env);
  CHECK(before.code == 2);
  CHECK_THAT(before.err, Catch::Contains("runledger up --root"));

  std::ofstream(root / "database_url") << db.url() << "\n";
  const Outcome created = run_command(
      scratch, {"token", "create", "--scope", "bot", "--name", "b", "--root", root.string()}, env);
  REQUIRE(created.code == 0);
  const Outcome listed = run_command(scratch, {"token", "list", "--root", root.string()}, env);
  CHECK(listed.code == 0);
  CHECK(lines(listed.out).size() == 1);
  CHECK(run_command(scratch, {"token", "revoke", "b", "--root", root.string()}, env).code == 0);
}
