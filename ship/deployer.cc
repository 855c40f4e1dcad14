// The local deployer: the commit's tree extracted under <root>/<sha>, <root>/current pointing
// at it, and a row per deploy key.
#include <unistd.h>

#include "errors/errors.h"
#include "ids/ids.h"
#include "ship/git.h"
#include "ship/ship.h"
#include "ship/statements.h"
#include "subprocess/subprocess.h"

namespace runledger::ship {

namespace fs = std::filesystem;

LocalDeployer::LocalDeployer(pg::Pool& pool, fs::path repository, fs::path root)
    : pool_(pool), repository_(std::move(repository)), root_(std::move(root)) {
  fs::create_directories(root_);
}

Deploy LocalDeployer::deploy(const std::string& key, const std::string& sha) {
  check_key(key, "deploy key");
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows = pg::exec(tx, sql::kGetDeploy, key);
    if (!rows.empty()) {
      return {key, rows[0][1].as<std::string>(), rows[0][2].as<std::string>(), false};
    }
  }
  // The full commit id, which also checks that it exists.
  const std::string commit = git_line(repository_, {"rev-parse", "--verify", sha + "^{commit}"});
  const fs::path target = root_ / commit;
  if (!fs::exists(target)) {
    // Extracted beside, then renamed: a half-extracted tree is never at `target`.
    const fs::path staging = root_ / (".staging-" + random_uuid());
    fs::create_directories(staging);
    const fs::path tar = staging.string() + ".tar";
    git_line(repository_, {"archive", "--format=tar", "-o", tar.string(), commit});
    subprocess::Spawn extract({"tar", "-xf", tar.string(), "-C", staging.string()});
    extract.cwd = root_;
    extract.output = subprocess::Output::capture;
    extract.capture_limit = 1 << 16;
    const auto untar = subprocess::run(extract);
    fs::remove(tar);
    if (!untar.exit.success()) {
      fs::remove_all(staging);
      throw std::runtime_error("extracting " + commit + " failed: " + untar.output);
    }
    std::error_code ec;
    fs::rename(staging, target, ec);
    if (ec) fs::remove_all(staging);  // extracted by another deploy meanwhile
  }
  const fs::path link = root_ / ("current-" + random_uuid());
  fs::create_directory_symlink(commit, link);
  fs::rename(link, root_ / "current");  // atomic: current always names a whole tree
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  if (pg::exec(tx, sql::kRecordDeploy, key, commit, target.string()).empty()) {
    const auto rows = pg::exec(tx, sql::kGetDeploy, key);
    return {key, rows[0][1].as<std::string>(), rows[0][2].as<std::string>(), false};
  }
  return {key, commit, target, true};
}

}  // namespace runledger::ship
