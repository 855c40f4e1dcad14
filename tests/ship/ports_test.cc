// The ship pipeline's local ports against a real bare git repository and a real database.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <pqxx/pqxx>

#include "errors/errors.h"
#include "ids/ids.h"
#include "ship/ship.h"
#include "tests/support/test_database.h"

using namespace runledger;
using namespace runledger::testing;
namespace fs = std::filesystem;

namespace {

// A bare repository with a main branch, and a clone to make commits in.
struct Repo {
  Repo() {
    fs::create_directories(dir);
    sh("git init -q --bare -b main " + bare.string());
    sh("git init -q -b main " + work.string());
    git("commit -q --allow-empty -m initial");
    git("remote add origin " + bare.string());
    git("push -q origin main");
  }
  ~Repo() { fs::remove_all(dir); }

  static void sh(const std::string& command) {
    INFO(command);
    REQUIRE(std::system((command + " >/dev/null 2>&1").c_str()) == 0);
  }
  void git(const std::string& args) const {
    sh("git -C " + work.string() + " -c user.name=test -c user.email=test@example.invalid " + args);
  }
  // A commit adding `file` on `branch` (created from main), pushed.
  void push_branch(const std::string& branch, const std::string& file) const {
    git("checkout -q -B " + branch + " origin/main");
    std::ofstream(work / file) << "content of " << file << "\n";
    git("add " + file);
    git("commit -q -m 'add " + file + "'");
    git("push -q -f origin " + branch);
    git("fetch -q origin");
  }
  std::string rev(const std::string& what) const {
    const fs::path out = dir / "rev.out";
    const std::string command =
        "git --git-dir=" + bare.string() + " rev-parse " + what + " > " + out.string();
    INFO(command);
    REQUIRE(std::system(command.c_str()) == 0);
    std::string line;
    std::getline(std::ifstream(out) >> std::ws, line);
    return line;
  }

  fs::path dir = fs::temp_directory_path() / ("ship-ports-" + random_uuid());
  fs::path bare = dir / "origin.git";
  fs::path work = dir / "work";
};

}  // namespace

TEST_CASE("the forge reads branch heads from the repository and keeps one open change per branch") {
  TestDatabase db;
  pg::Pool pool(db.pool_options(2));
  Repo repo;
  repo.push_branch("feature-1", "a.txt");
  ship::LocalForge forge(pool, repo.bare);
  CHECK(forge.branch_head("feature-1") == repo.rev("refs/heads/feature-1"));
  CHECK_FALSE(forge.branch_head("nope").has_value());
  CHECK_THROWS_AS(forge.branch_head("--upload-pack=x"), InvalidArgument);
  const auto first = forge.open_or_update("feature-1", "Add a", "first");
  CHECK(first.created);
  const auto second = forge.open_or_update("feature-1", "Add a (edited)", "second");
  CHECK_FALSE(second.created);
  CHECK(second.change.id == first.change.id);
  CHECK(forge.get(first.change.id).title == "Add a (edited)");
  CHECK(forge.find_open("feature-1")->id == first.change.id);
  CHECK_THROWS_AS(forge.open_or_update("missing", "t", "b"), InvalidArgument);
}

TEST_CASE("a merge is a real merge commit on main, made once even when its record was lost") {
  TestDatabase db;
  pg::Pool pool(db.pool_options(2));
  Repo repo;
  repo.push_branch("feature-1", "a.txt");
  ship::LocalForge forge(pool, repo.bare);
  const auto change = forge.open_or_update("feature-1", "Add a", "").change;
  const std::string main_before = repo.rev("refs/heads/main");
  const auto merged = forge.merge(change.id);
  CHECK(merged.state == ship::ChangeState::merged);
  REQUIRE(merged.merge_sha);
  CHECK(*merged.merge_sha == repo.rev("refs/heads/main"));
  CHECK(repo.rev(*merged.merge_sha + "^1") == main_before);
  CHECK(repo.rev(*merged.merge_sha + "^2") == repo.rev("refs/heads/feature-1"));
  CHECK(forge.merge(change.id).merge_sha == merged.merge_sha);  // idempotent
  // The merge happened in git but its record was lost (a crash between the two).
  pqxx::connection conn(db.url());
  pqxx::nontransaction(conn).exec("UPDATE change_requests SET state = 'open', merge_sha = NULL");
  const auto again = forge.merge(change.id);
  CHECK(again.merge_sha == merged.merge_sha);
  CHECK(repo.rev("refs/heads/main") == *merged.merge_sha);  // no second merge commit
}

TEST_CASE("a deploy extracts the commit and is idempotent on its key") {
  TestDatabase db;
  pg::Pool pool(db.pool_options(2));
  Repo repo;
  repo.push_branch("feature-1", "a.txt");
  const fs::path root = repo.dir / "deploys";
  ship::LocalDeployer deployer(pool, repo.bare, root);
  const auto first = deployer.deploy("ship-1", "feature-1");
  CHECK(first.created);
  CHECK(first.sha == repo.rev("refs/heads/feature-1"));
  CHECK(fs::exists(root / first.sha / "a.txt"));
  CHECK(fs::read_symlink(root / "current") == fs::path(first.sha));
  const auto again = deployer.deploy("ship-1", "main");
  CHECK_FALSE(again.created);
  CHECK(again.sha == first.sha);
  CHECK_THROWS(deployer.deploy("ship-2", "no-such-commit"));
}

TEST_CASE("a thread message is posted once per dedupe key") {
  TestDatabase db;
  pg::Pool pool(db.pool_options(2));
  ship::ThreadOutbox outbox(pool);
  CHECK(outbox.post("thread-1", "ship-1/started", "Working on it."));
  CHECK_FALSE(outbox.post("thread-1", "ship-1/started", "Working on it (again)."));
  CHECK(outbox.post("thread-1", "ship-1/done", "Done."));
  const auto messages = outbox.messages("thread-1", {}).items;  // newest first
  REQUIRE(messages.size() == 2);
  CHECK(messages[1].body == "Working on it.");
  CHECK(outbox.messages("thread-2", {}).items.empty());
}

TEST_CASE("the policy allows what was granted and nothing else") {
  TestDatabase db;
  pg::Pool pool(db.pool_options(2));
  ship::Policy policy(pool);
  CHECK_FALSE(policy.allows("alice", "agent:run:coding"));
  policy.grant("alice", "agent:run:coding");
  policy.grant("alice", "agent:run:coding");  // idempotent
  CHECK(policy.allows("alice", "agent:run:coding"));
  CHECK_FALSE(policy.allows("alice", "agent:run:review"));
  CHECK_FALSE(policy.allows("bob", "agent:run:coding"));
  policy.revoke("alice", "agent:run:coding");
  CHECK_FALSE(policy.allows("alice", "agent:run:coding"));
}
