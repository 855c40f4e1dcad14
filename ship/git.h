// Running git on a bare repository. Private to ship/.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace runledger::ship {

// git --git-dir=<repository> <args...>: the exit code and the output (stdout and stderr), with
// a fixed identity for commits the forge makes.
std::pair<int, std::string> run_git(const std::filesystem::path& repository,
                                    const std::vector<std::string>& args);
// Same, throwing std::runtime_error with git's output when it fails; returns the output's first
// line.
std::string git_line(const std::filesystem::path& repository, const std::vector<std::string>& args);

}  // namespace runledger::ship
