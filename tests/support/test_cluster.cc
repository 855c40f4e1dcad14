// test_cluster run -- COMMAND...: one throwaway embedded cluster for a whole test run. Starts it,
// prepares the migrated template, runs COMMAND with RUNLEDGER_TEST_DATABASE_URL set, stops the
// cluster and exits with COMMAND's status.
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <vector>

#include "cluster/cluster.h"
#include "ids/ids.h"
#include "tests/support/test_database.h"

int main(int argc, char** argv) {
  if (argc < 4 || std::strcmp(argv[1], "run") != 0 || std::strcmp(argv[2], "--") != 0) {
    std::fprintf(stderr, "usage: test_cluster run -- COMMAND [ARGS...]\n");
    return 2;
  }
  runledger::cluster::Options options;
  options.root =
      std::filesystem::temp_directory_path() / ("runledger-test-" + runledger::random_uuid());
  options.durable = false;
  options.remove_on_stop = true;
  options.database = "postgres";
  runledger::cluster::EmbeddedCluster cluster(options);
  cluster.start();
  const std::string url = cluster.url("postgres");
  runledger::testing::prepare_template(url);
  spdlog::info("test cluster ready on port {}", cluster.port());

  const pid_t child = fork();
  if (child == 0) {
    setenv("RUNLEDGER_TEST_DATABASE_URL", url.c_str(), 1);
    execvp(argv[3], argv + 3);
    std::perror("exec");
    _exit(127);
  }
  // Ctrl-C reaches the whole process group: let the tests end and still stop the cluster.
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  cluster.stop();
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}
