#include "ship/git.h"

#include <stdexcept>

#include "subprocess/subprocess.h"

namespace runledger::ship {

std::pair<int, std::string> run_git(const std::filesystem::path& repository,
                                    const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"git", "--git-dir=" + repository.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  subprocess::Spawn git(argv);
  git.env = {{"GIT_AUTHOR_NAME", "runledger forge"},
             {"GIT_AUTHOR_EMAIL", "forge@runledger.invalid"},
             {"GIT_COMMITTER_NAME", "runledger forge"},
             {"GIT_COMMITTER_EMAIL", "forge@runledger.invalid"}};
  git.cwd = repository;
  git.output = subprocess::Output::capture;
  auto child = subprocess::run(git);
  return {child.exit.shell_status(), std::move(child.output)};
}

std::string git_line(const std::filesystem::path& repository,
                     const std::vector<std::string>& args) {
  const auto [code, output] = run_git(repository, args);
  if (code != 0) {
    std::string command = "git";
    for (const auto& a : args) command += " " + a;
    throw std::runtime_error(command + " failed (" + std::to_string(code) + "): " + output);
  }
  return output.substr(0, output.find('\n'));
}

}  // namespace runledger::ship
