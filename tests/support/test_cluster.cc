// test_cluster run -- COMMAND...: one throwaway embedded cluster for a whole test run. Starts it,
// prepares the migrated template, runs COMMAND with RUNLEDGER_TEST_DATABASE_URL set, stops the
// cluster and exits with COMMAND's status.
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "cluster/cluster.h"
#include "ids/ids.h"
#include "subprocess/subprocess.h"
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

  runledger::subprocess::Spawn command(std::vector<std::string>(argv + 3, argv + argc));
  command.env = {{"RUNLEDGER_TEST_DATABASE_URL", url}};
  std::optional<runledger::subprocess::Child> child;
  try {
    child = runledger::subprocess::spawn(command);
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "test_cluster: %s\n", e.what());
    return 127;  // the cluster stops with `cluster`
  }
  // Ctrl-C reaches the whole process group: let the tests end and still stop the cluster. (The
  // child starts with every signal at its default whatever we do here.)
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  const int status = child->wait().shell_status();
  cluster.stop();
  return status;
}
