#include "cluster/process.h"

#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace runledger::cluster::detail {

std::optional<OsUser> server_user() {
  if (geteuid() != 0) return std::nullopt;
  auto user = subprocess::find_os_user("postgres");
  if (!user) {
    throw std::runtime_error(
        "running as root, but there is no `postgres` OS user to run PostgreSQL as");
  }
  return user;
}

void give_to(const std::optional<OsUser>& user, const std::filesystem::path& path) {
  if (user && chown(path.c_str(), user->uid, user->gid) != 0) {
    throw std::system_error(errno, std::generic_category(),
                            "chown " + path.string() + " to " + user->name);
  }
}

subprocess::Completed run(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
                          const std::optional<OsUser>& user) {
  subprocess::Spawn command(argv);
  command.cwd = cwd;
  command.user = user;
  if (user) command.env = {{"HOME", user->home.string()}};
  command.output = subprocess::Output::capture;
  return subprocess::run(command);
}

std::string run_checked(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
                        const std::optional<OsUser>& user) {
  subprocess::Completed result = run(argv, cwd, user);
  if (!result.exit.success()) {
    std::string command;
    for (const auto& arg : argv) command += (command.empty() ? "" : " ") + arg;
    throw std::runtime_error(command + " failed (" + result.exit.to_string() +
                             "): " + result.output);
  }
  return std::move(result.output);
}

}  // namespace runledger::cluster::detail
