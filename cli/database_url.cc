#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "cli/cli.h"
#include "cluster/cluster.h"
#include "errors/errors.h"

namespace runledger::cli {

std::string database_url() {
  if (const char* url = std::getenv("DATABASE_URL"); url && *url) return url;
  const auto file = cluster::default_root(std::filesystem::current_path()) / "database_url";
  std::ifstream in(file);
  std::string url;
  if (in && std::getline(in, url) && !url.empty()) return url;
  throw std::runtime_error(
      "no database: set DATABASE_URL, or start `runledger up` (./dev up) in "
      "this directory first");
}

std::optional<std::string> flag(const Args& args, const std::string& name) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] != name) continue;
    if (i + 1 >= args.size()) throw InvalidArgument(name + " needs a value");
    return args[i + 1];
  }
  return std::nullopt;
}

int positive(const std::optional<std::string>& value, const std::string& name, int fallback) {
  if (!value) return fallback;
  try {
    std::size_t used = 0;
    const int n = std::stoi(*value, &used);
    if (used == value->size() && n > 0) return n;
  } catch (const std::exception&) {
  }
  throw InvalidArgument(name + " must be a positive integer");
}

int positive(const Args& args, const std::string& name, int fallback) {
  return positive(flag(args, name), name, fallback);
}

}  // namespace runledger::cli
