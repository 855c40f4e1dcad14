// Command lines, declared once and parsed before anything runs. Each command declares the
// options and positional arguments it takes (or the subcommands it groups); parse_command_line()
// resolves a command line against those declarations, and usage() writes the usage text from
// the same declarations, so the two cannot drift apart.
//
// Contract: an option is `--name VALUE`, `--name=VALUE`, or a switch `--name`; options and
// positionals come in any order, and after `--` every argument is positional. `-h` or `--help`
// anywhere before `--` asks for the usage of the command named so far (nothing else happens).
// Refused with InvalidArgument, whose message names the offending argument and whose details
// carry "command" (e.g. "runledger runs ls") and "argument": an unknown subcommand or option, an
// option without its value (a following argument that starts with `--` is not a value: write
// `--name=--value`), a switch given a value, an option given twice, an integer option whose value
// is not a decimal integer within its range (`10abc`, `-1` where positive, an overflow, an empty
// value), an extra, missing or empty positional, a missing required option, and an option given
// without an option it needs. A declaration that contradicts itself (an unknown option in
// `needs`, an integer fallback out of range, ...) is a programming error: std::logic_error.
//
// Thread-safety: immutable values; parsing and usage() are pure.
#pragma once

#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace runledger::cli {

struct IntegerRange {
  int min;
  int max;
};
inline constexpr IntegerRange kPositive{1, std::numeric_limits<int>::max()};

// The one integer parser of the command line: all of `text` is a decimal integer (an optional
// '-', then digits) within `range`; InvalidArgument naming `name` otherwise.
int parse_integer(std::string_view text, std::string_view name, IntegerRange range);

struct Option {
  std::string name{};   // "--limit"
  std::string value{};  // what usage calls the value ("N", "DIR"); empty: a switch without one
  std::string help{};
  bool required = false;
  std::optional<IntegerRange> integer{};  // the value must be an integer in this range
  std::string fallback{};                 // the value when absent (shown in usage); empty: none
  std::vector<std::string> needs{};       // options that must be given with this one
};

struct Positional {
  std::string name{};  // "RUN_ID"; every positional is required and non-empty
  std::string help{};
};

class Arguments;

// A command that runs (`run` set), or a group of subcommands (`subcommands` not empty). Every
// member has an initializer so that declarations may name only the members they need.
struct Command {
  std::string name{};
  std::string summary{};      // one line, for listings
  std::string description{};  // more, for the command's own usage
  std::vector<Option> options{};
  std::vector<Positional> positionals{};
  std::function<int(const Arguments&)> run{};
  std::vector<Command> subcommands{};
  std::string default_subcommand{};  // what a group runs when given no arguments
  std::string footer{};              // the last paragraph of its usage
};

// The parsed arguments of one command. Reading a name the command does not declare is a
// programming error (std::logic_error). Refers to its Command, which must outlive it.
class Arguments {
 public:
  explicit Arguments(const Command& command) : command_(&command) {}

  // The value of option `name` as given, else its fallback; nullopt when neither.
  std::optional<std::string> text(std::string_view name) const;
  // Same for an integer option.
  std::optional<int> integer(std::string_view name) const;
  // The value of a required option, or of one with a fallback.
  std::string value(std::string_view name) const;
  // Whether option `name` (e.g. a switch) was on the command line.
  bool given(std::string_view name) const;
  const std::string& positional(std::string_view name) const;

 private:
  friend class CommandLineParser;
  const Option& declared(std::string_view name) const;

  const Command* command_;
  std::map<std::string, std::string, std::less<>> options_;
  std::map<std::string, std::string, std::less<>> positionals_;
};

// A command line resolved against a program's commands.
struct CommandLine {
  std::string path;                    // "runledger runs ls": the command named
  const Command* command;              // what to run; nullptr when the usage was asked for
  std::string usage;                   // the usage to print when it was asked for
  std::optional<Arguments> arguments;  // set when `command` is
};

// `args` are the words after the program's name; `program` a group, named like the executable.
CommandLine parse_command_line(const Command& program, const std::vector<std::string>& args);

// The usage of `command`, which `path` names (e.g. "runledger runs"): a group lists every
// command under it, a command describes its positionals and options.
std::string usage(const Command& command, const std::string& path);

}  // namespace runledger::cli
