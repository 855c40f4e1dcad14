#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <pqxx/pqxx>

#include "cluster/cluster.h"
#include "errors/errors.h"

namespace {

namespace fs = std::filesystem;
using runledger::cluster::EmbeddedCluster;
using runledger::cluster::Options;

// A fresh directory under /tmp, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/runledger-cluster-test-XXXXXX";
    if (mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
    // mkdtemp makes it 0700; when the tests run as root, the postgres user must get through
    // to the cluster root inside.
    fs::permissions(path_, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

Options throwaway(const fs::path& root) {
  Options options;
  options.root = root;
  options.durable = false;
  options.remove_on_stop = true;
  return options;
}

std::string postmaster_pid(const fs::path& root) {
  std::ifstream in(root / "pgdata" / "postmaster.pid");
  std::string pid;
  std::getline(in, pid);
  return pid;
}

// Runs in a forked child: owns a cluster, leaves data in it, reports readiness on `ready_fd`
// and waits to be killed. No Catch2 here: assertions belong to the main process.
[[noreturn]] void own_until_killed(const fs::path& root, int ready_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test run
  try {
    Options options = throwaway(root);
    options.remove_on_stop = false;
    EmbeddedCluster cluster(options);
    cluster.start();
    pqxx::connection connection{cluster.url()};
    pqxx::work tx{connection};
    tx.exec0("CREATE TABLE kept (value text)");
    tx.exec0("INSERT INTO kept VALUES ('survives')");
    tx.commit();
    if (write(ready_fd, "R", 1) != 1) _exit(1);
    for (;;) pause();
  } catch (...) {
    _exit(1);
  }
}

// Forks an owner that starts a cluster on `root`, waits until it is up, and kills it with
// SIGKILL, leaving its postmaster running. Returns false if the owner failed to start.
bool start_and_kill_owner(const fs::path& root) {
  int ready[2];
  if (pipe(ready) != 0) return false;
  const pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    own_until_killed(root, ready[1]);
  }
  close(ready[1]);
  char byte = 0;
  const bool started = child > 0 && read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  if (child > 0) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  }
  return started;
}

}  // namespace

TEST_CASE("a throwaway cluster serves SQL and removes its root on stop", "[cluster]") {
  TempDir dir;
  const fs::path root = dir.path() / "pg";
  EmbeddedCluster cluster(throwaway(root));
  cluster.start();
  REQUIRE(cluster.running());
  CHECK(cluster.port() > 0);
  {
    pqxx::connection connection{cluster.url()};
    pqxx::work tx{connection};
    CHECK(tx.exec1("SELECT 1")[0].as<int>() == 1);
    CHECK(tx.exec1("SELECT current_database()")[0].as<std::string>() == "runledger");
    tx.commit();
  }
  cluster.stop();
  CHECK_FALSE(cluster.running());
  CHECK_FALSE(fs::exists(root));
}

TEST_CASE("a second owner of a live root is refused with Conflict", "[cluster]") {
  TempDir dir;
  const fs::path root = dir.path() / "pg";
  EmbeddedCluster first(throwaway(root));
  first.start();
  EmbeddedCluster second(throwaway(root));
  try {
    second.start();
    FAIL("start() on a root owned by a live process succeeded");
  } catch (const runledger::Conflict& e) {
    CHECK(e.details().at("pid") == getpid());
  }
  CHECK_FALSE(second.running());
  CHECK(first.running());
}

TEST_CASE("after the owner is killed, the next owner restarts the leftover server", "[cluster]") {
  TempDir dir;
  const fs::path root = dir.path() / "pg";
  REQUIRE(start_and_kill_owner(root));
  const std::string leftover = postmaster_pid(root);
  REQUIRE_FALSE(leftover.empty());

  EmbeddedCluster cluster(throwaway(root));
  cluster.start();
  REQUIRE(cluster.running());
  CHECK(postmaster_pid(root) != leftover);  // stopped and started again, not adopted
  pqxx::connection connection{cluster.url()};
  pqxx::work tx{connection};
  CHECK(tx.exec1("SELECT value FROM kept")[0].as<std::string>() == "survives");
}
