#include "cli/arguments/arguments.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <stdexcept>

#include "errors/errors.h"

namespace runledger::cli {
namespace {

constexpr std::size_t kWidth = 100;       // usage lines wrap here
constexpr std::size_t kHelpColumn = 28;   // where descriptions start in listings
constexpr std::size_t kShownLength = 64;  // of an argument quoted in an error

std::string shown(std::string_view argument) {
  if (argument.size() <= kShownLength) return std::string(argument);
  return std::string(argument.substr(0, kShownLength)) + "...";
}

bool is_help(std::string_view argument) {
  return argument == "--help" || argument == "-h";
}

bool looks_like_option(std::string_view argument) {
  return argument.size() > 1 && argument[0] == '-';
}

[[noreturn]] void refuse(const std::string& message, const std::string& path,
                         std::string_view argument) {
  throw InvalidArgument(message, {{"command", path}, {"argument", shown(argument)}});
}

// `text` as lines of at most `width` characters (words are never split), the first prefixed by
// `first`, the others by `rest`.
std::string wrap(const std::string& text, const std::string& first, const std::string& rest,
                 std::size_t width = kWidth) {
  std::string out;
  std::string line = first;
  bool line_has_words = false;
  std::size_t at = 0;
  while (at < text.size()) {
    if (text[at] == '\n') {  // an explicit line break
      out += line + "\n";
      line = rest;
      line_has_words = false;
      ++at;
      continue;
    }
    if (text[at] == ' ') {
      ++at;
      continue;
    }
    const std::size_t end = std::min(text.find_first_of(" \n", at), text.size());
    const std::string word = text.substr(at, end - at);
    at = end;
    if (line_has_words && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = rest;
      line_has_words = false;
    }
    line += (line_has_words ? " " : "") + word;
    line_has_words = true;
  }
  if (line_has_words || out.empty()) out += line + "\n";
  return out;
}

// The words of a command's synopsis after its path: positionals, then options (optional ones in
// brackets), e.g. {"RUN_ID", "--by NAME", "[--limit N]"}.
std::vector<std::string> synopsis_words(const Command& command) {
  std::vector<std::string> words;
  for (const auto& p : command.positionals) words.push_back(p.name);
  for (const auto& o : command.options) {
    const std::string word = o.value.empty() ? o.name : o.name + " " + o.value;
    words.push_back(o.required ? word : "[" + word + "]");
  }
  return words;
}

// "  runs ls [--status S] ..." wrapped at kWidth, continuation lines aligned after the path.
std::string synopsis(const Command& command, const std::string& prefix, const std::string& path) {
  const std::string indent(prefix.size() + path.size() + 1, ' ');
  std::string out;
  std::string line = prefix + path;
  for (const auto& word : synopsis_words(command)) {
    if (line.size() + 1 + word.size() > kWidth && line.size() > indent.size()) {
      out += line + "\n";
      line = indent + word;
    } else {
      line += " " + word;
    }
  }
  return out + line + "\n";
}

// One entry of a table: `left` (one line or more), then `help` from kHelpColumn, on the same line
// when `left` is one line narrow enough.
std::string table_row(std::string left, const std::string& help) {
  if (left.ends_with('\n')) left.pop_back();
  if (help.empty()) return left + "\n";
  const std::string indent(kHelpColumn, ' ');
  if (left.find('\n') == std::string::npos && left.size() + 2 <= kHelpColumn) {
    return wrap(help, left + std::string(kHelpColumn - left.size(), ' '), indent);
  }
  return left + "\n" + wrap(help, indent, indent);
}

std::string option_help(const Option& o) {
  std::string help = o.help;
  std::vector<std::string> notes;
  if (o.integer) {
    if (o.integer->min == kPositive.min && o.integer->max == kPositive.max) {
      notes.push_back("a positive integer");
    } else {
      notes.push_back("an integer from " + std::to_string(o.integer->min) + " to " +
                      std::to_string(o.integer->max));
    }
  }
  if (!o.fallback.empty()) notes.push_back("default " + o.fallback);
  for (const auto& needed : o.needs) notes.push_back("needs " + needed);
  if (o.required) notes.push_back("required");
  if (!notes.empty()) {
    std::string joined;
    for (const auto& n : notes) joined += (joined.empty() ? "" : "; ") + n;
    help += (help.empty() ? "" : " ") + ("(" + joined + ")");
  }
  return help;
}

// Every command under `group`, depth first: its path relative to the group, and itself.
void leaves(const Command& group, const std::string& relative,
            std::vector<std::pair<std::string, const Command*>>& out) {
  for (const auto& sub : group.subcommands) {
    const std::string path = relative.empty() ? sub.name : relative + " " + sub.name;
    if (sub.subcommands.empty()) {
      out.emplace_back(path, &sub);
    } else {
      leaves(sub, path, out);
    }
  }
}

std::string subcommand_names(const Command& group) {
  std::string names;
  for (const auto& sub : group.subcommands) names += (names.empty() ? "" : ", ") + sub.name;
  return names;
}

const Command* find_subcommand(const Command& group, std::string_view name) {
  for (const auto& sub : group.subcommands) {
    if (sub.name == name) return &sub;
  }
  return nullptr;
}

const Option* find_option(const Command& command, std::string_view name) {
  for (const auto& o : command.options) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

// The declarations of one command are consistent: programming errors, found by any test that
// asks for its usage.
void check_declarations(const Command& command, const std::string& path) {
  const auto wrong = [&](const std::string& what) {
    throw std::logic_error("command `" + path + "` declares " + what);
  };
  if (command.run && !command.subcommands.empty()) wrong("both a run function and subcommands");
  if (!command.run && command.subcommands.empty()) wrong("neither a run function nor subcommands");
  if (!command.default_subcommand.empty() && !find_subcommand(command, command.default_subcommand))
    wrong("an unknown default subcommand " + command.default_subcommand);
  std::set<std::string> names;
  for (const auto& o : command.options) {
    if (!o.name.starts_with("--") || o.name.size() < 3 || o.name.find('=') != std::string::npos ||
        o.name == "--help")
      wrong("an option named '" + o.name + "'");
    if (!names.insert(o.name).second) wrong("option " + o.name + " twice");
    if (o.value.empty() && (o.integer || o.required || !o.fallback.empty()))
      wrong("switch " + o.name + " with a value's properties");
    if (o.required && !o.fallback.empty()) wrong("required option " + o.name + " with a fallback");
    if (o.integer && o.integer->min > o.integer->max) wrong("an empty range for " + o.name);
    if (o.integer && !o.fallback.empty()) {
      try {
        parse_integer(o.fallback, o.name, *o.integer);
      } catch (const InvalidArgument&) {
        wrong("an invalid fallback for " + o.name);
      }
    }
  }
  for (const auto& o : command.options) {
    for (const auto& needed : o.needs) {
      if (!names.contains(needed)) wrong(o.name + " needing an undeclared " + needed);
    }
  }
  for (const auto& p : command.positionals) {
    if (p.name.empty() || looks_like_option(p.name)) wrong("a positional named '" + p.name + "'");
    if (!names.insert(p.name).second) wrong(p.name + " twice");
  }
}

}  // namespace

int parse_integer(std::string_view text, std::string_view name, IntegerRange range) {
  const std::string expected =
      range.min == kPositive.min && range.max == kPositive.max
          ? std::string("a positive integer")
          : "an integer from " + std::to_string(range.min) + " to " + std::to_string(range.max);
  long long value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || value < range.min ||
      value > range.max) {
    throw InvalidArgument(
        std::string(name) + " must be " + expected + ", got '" + shown(text) + "'",
        {{"argument", std::string(name)}});
  }
  return static_cast<int>(value);
}

const Option& Arguments::declared(std::string_view name) const {
  if (const Option* o = find_option(*command_, name)) return *o;
  throw std::logic_error("command " + command_->name + " reads an undeclared option " +
                         std::string(name));
}

std::optional<std::string> Arguments::text(std::string_view name) const {
  const Option& o = declared(name);
  if (const auto it = options_.find(name); it != options_.end()) return it->second;
  if (!o.fallback.empty()) return o.fallback;
  return std::nullopt;
}

std::optional<int> Arguments::integer(std::string_view name) const {
  const Option& o = declared(name);
  if (!o.integer) {
    throw std::logic_error("command " + command_->name + " reads " + std::string(name) +
                           " as an integer, which it does not declare");
  }
  const auto value = text(name);
  if (!value) return std::nullopt;
  return parse_integer(*value, name, *o.integer);
}

std::string Arguments::value(std::string_view name) const {
  auto v = text(name);
  if (!v) {
    throw std::logic_error("command " + command_->name + " reads " + std::string(name) +
                           " as always given, but it is neither required nor has a fallback");
  }
  return *v;
}

bool Arguments::given(std::string_view name) const {
  declared(name);
  return options_.contains(name);
}

const std::string& Arguments::positional(std::string_view name) const {
  const auto it = positionals_.find(name);
  if (it != positionals_.end()) return it->second;
  throw std::logic_error("command " + command_->name + " reads an undeclared positional " +
                         std::string(name));
}

// Parses the arguments of one command (not a group); a class so that it may fill Arguments.
class CommandLineParser {
 public:
  static Arguments parse(const Command& command, const std::string& path,
                         const std::vector<std::string>& args) {
    Arguments out(command);
    std::size_t positionals = 0;
    bool only_positionals = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (!only_positionals && a == "--") {
        only_positionals = true;
        continue;
      }
      if (!only_positionals && looks_like_option(a)) {
        const auto eq = a.starts_with("--") ? a.find('=') : std::string::npos;
        const std::string name = a.substr(0, eq);
        const Option* o = find_option(command, name);
        if (o == nullptr) {
          refuse("unknown option '" + shown(name) + "'", path, name);
        }
        std::string value;
        if (o->value.empty()) {
          if (eq != std::string::npos) refuse(name + " takes no value", path, a);
        } else if (eq != std::string::npos) {
          value = a.substr(eq + 1);
        } else if (i + 1 < args.size() && !args[i + 1].starts_with("--")) {
          value = args[++i];
        } else {
          refuse(name + " needs a value (" + o->value + ")", path, name);
        }
        if (out.options_.contains(name)) refuse(name + " is given twice", path, name);
        if (o->integer) {
          try {
            parse_integer(value, name, *o->integer);
          } catch (const InvalidArgument& e) {
            refuse(e.what(), path, name);
          }
        }
        out.options_.emplace(name, std::move(value));
        continue;
      }
      if (positionals >= command.positionals.size()) {
        std::string expected = "takes no positional argument";
        if (!command.positionals.empty()) {
          expected = "takes only";
          for (const auto& p : command.positionals) expected += " " + p.name;
        }
        refuse("unexpected argument '" + shown(a) + "' (" + expected + ")", path, a);
      }
      const Positional& p = command.positionals[positionals++];
      if (a.empty()) refuse(p.name + " is empty", path, p.name);
      out.positionals_.emplace(p.name, a);
    }
    if (positionals < command.positionals.size()) {
      const std::string& missing = command.positionals[positionals].name;
      refuse("missing " + missing, path, missing);
    }
    for (const auto& o : command.options) {
      if (o.required && !out.options_.contains(o.name)) {
        refuse(o.name + " is required", path, o.name);
      }
    }
    for (const auto& o : command.options) {
      if (!out.options_.contains(o.name)) continue;
      for (const auto& needed : o.needs) {
        if (!out.options_.contains(needed)) refuse(o.name + " needs " + needed, path, o.name);
      }
    }
    return out;
  }
};

CommandLine parse_command_line(const Command& program, const std::vector<std::string>& args) {
  const Command* command = &program;
  std::string path = program.name;
  std::size_t at = 0;
  const auto help_asked = [&] {
    for (std::size_t i = at; i < args.size() && args[i] != "--"; ++i) {
      if (is_help(args[i])) return true;
    }
    return false;
  };
  check_declarations(*command, path);
  while (!command->subcommands.empty()) {
    const Command* next = nullptr;
    if (at == args.size()) {
      if (command->default_subcommand.empty()) {
        refuse("missing a command (" + subcommand_names(*command) + ")", path, "");
      }
      next = find_subcommand(*command, command->default_subcommand);
    } else {
      next = find_subcommand(*command, args[at]);
      if (next == nullptr && help_asked()) return {path, nullptr, usage(*command, path), {}};
      if (next == nullptr) {
        // The program's usage lists its commands; a group's are listed here.
        const std::string names =
            command == &program ? "" : " (" + subcommand_names(*command) + ")";
        refuse("unknown command '" + shown(args[at]) + "'" + names, path, args[at]);
      }
      ++at;
    }
    command = next;
    path += " " + command->name;
    check_declarations(*command, path);
  }
  if (help_asked()) return {path, nullptr, usage(*command, path), {}};
  const std::vector<std::string> rest(args.begin() + static_cast<std::ptrdiff_t>(at), args.end());
  return {path, command, "", CommandLineParser::parse(*command, path, rest)};
}

std::string usage(const Command& command, const std::string& path) {
  check_declarations(command, path);
  std::string out;
  const std::string about =
      command.summary + (command.description.empty() ? "" : "\n\n" + command.description);
  if (!command.subcommands.empty()) {
    out += "usage: " + path + " COMMAND [ARGS]\n\n";
    if (!about.empty()) out += wrap(about, "", "") + "\n";
    std::vector<std::pair<std::string, const Command*>> all;
    leaves(command, "", all);
    for (const auto& [relative, leaf] : all) {
      out += table_row(synopsis(*leaf, "  ", relative), leaf->summary);
    }
    if (!command.default_subcommand.empty()) {
      out +=
          "\n" + wrap("`" + path + "` alone is `" + path + " " + command.default_subcommand + "`.",
                      "", "");
    }
    out += "\n" + wrap("`" + path + " COMMAND --help` describes a command.", "", "");
  } else {
    out += synopsis(command, "usage: ", path) + "\n";
    if (!about.empty()) out += wrap(about, "", "");
    if (!command.positionals.empty()) {
      out += "\narguments:\n";
      for (const auto& p : command.positionals) out += table_row("  " + p.name, p.help);
    }
    out += "\noptions:\n";
    for (const auto& o : command.options) {
      out += table_row("  " + o.name + (o.value.empty() ? "" : " " + o.value), option_help(o));
    }
    out += table_row("  -h, --help", "print this usage and exit");
  }
  if (!command.footer.empty()) out += "\n" + wrap(command.footer, "", "");
  return out;
}

}  // namespace runledger::cli
