#include <filesystem>
#include <fstream>

#include "cli/cli.h"
#include "cluster/cluster.h"
#include "errors/errors.h"

namespace runledger::cli {

std::string database_url(const std::optional<std::filesystem::path>& root) {
  if (const char* url = std::getenv("DATABASE_URL"); url && *url) return url;
  const auto file =
      root.value_or(cluster::default_root(std::filesystem::current_path())) / "database_url";
  std::ifstream in(file);
  std::string url;
  if (in && std::getline(in, url) && !url.empty()) return url;
  if (root) {
    throw InvalidArgument("no database: set DATABASE_URL, or start `runledger up --root " +
                          root->string() + "` first (" + file.string() + " does not exist)");
  }
  throw InvalidArgument(
      "no database: set DATABASE_URL, or start `runledger up` (./dev up) in "
      "this directory first");
}

}  // namespace runledger::cli
