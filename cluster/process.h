// Private to the cluster module: running PostgreSQL binaries as the right OS user.
//
// PostgreSQL refuses to run as root, so when this process is root every binary runs as the
// `postgres` OS user; otherwise it runs as the current user. Commands are exec'd with an
// explicit argv (no shell), so paths never need quoting.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace runledger::cluster::detail {

// The identity a child switches to before exec.
struct OsUser {
  std::string name;
  uid_t uid;
  gid_t gid;
  std::filesystem::path home;
  std::vector<gid_t> groups;  // supplementary groups, resolved before fork
};

// The `postgres` user when running as root, nullopt otherwise (run as ourselves).
// Throws std::runtime_error when root and there is no `postgres` user.
std::optional<OsUser> server_user();

// Hands `path` to the server user when there is one (a no-op when not root).
void give_to(const std::optional<OsUser>& user, const std::filesystem::path& path);

struct RunResult {
  int exit_code;       // -1 when killed by a signal
  std::string output;  // stdout and stderr, interleaved
};

// Runs argv[0] (an absolute path) as `user` with `cwd` as working directory and waits for it.
RunResult run(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
              const std::optional<OsUser>& user);

// Like run(), but throws std::runtime_error carrying the output unless the exit code is 0.
std::string run_checked(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
                        const std::optional<OsUser>& user);

}  // namespace runledger::cluster::detail
