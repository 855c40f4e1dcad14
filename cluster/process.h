// Private to the cluster module: running PostgreSQL binaries as the right OS user.
//
// PostgreSQL refuses to run as root, so when this process is root every binary runs as the
// `postgres` OS user, with HOME its home (tools look for dotfiles there, and root's home is not
// readable by postgres); otherwise it runs as the current user. Commands are exec'd with an
// explicit argv (no shell, subprocess::spawn), so paths never need quoting.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "subprocess/subprocess.h"

namespace runledger::cluster::detail {

using subprocess::OsUser;

// The `postgres` user when running as root, nullopt otherwise (run as ourselves).
// Throws std::runtime_error when root and there is no `postgres` user.
std::optional<OsUser> server_user();

// Hands `path` to the server user when there is one (a no-op when not root).
void give_to(const std::optional<OsUser>& user, const std::filesystem::path& path);

// Runs argv[0] (an absolute path) as `user` with `cwd` as working directory and waits for it;
// its stdout and stderr are the output.
subprocess::Completed run(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
                          const std::optional<OsUser>& user);

// Like run(), but throws std::runtime_error carrying the output unless it exited with 0.
std::string run_checked(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
                        const std::optional<OsUser>& user);

}  // namespace runledger::cluster::detail
