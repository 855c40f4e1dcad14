// The command-line parser (cli/arguments/arguments.h) on its own: what it accepts, what it refuses
// and how it says so, and the usage it writes from the declarations.
#include <catch2/catch.hpp>

#include <climits>
#include <stdexcept>

#include "cli/arguments/arguments.h"
#include "errors/errors.h"

using namespace runledger;
using cli::Arguments;
using cli::Command;
using cli::kPositive;
using cli::parse_command_line;

namespace {

// A program shaped like runledger's: a command, a group with a default, options of every kind.
Command test_program(bool* ran = nullptr) {
  const auto run = [ran](const Arguments&) {
    if (ran != nullptr) *ran = true;
    return 0;
  };
  return {
      .name = "prog",
      .summary = "a test program",
      .subcommands =
          {
              {.name = "serve",
               .summary = "serve things",
               .options = {{.name = "--every",
                            .value = "S",
                            .help = "seconds between rounds",
                            .integer = kPositive,
                            .fallback = "60"},
                           {.name = "--offset",
                            .value = "N",
                            .help = "a shift",
                            .integer = cli::IntegerRange{-5, 5}},
                           {.name = "--name", .value = "NAME", .help = "who", .required = true},
                           {.name = "--dry-run", .help = "change nothing"},
                           {.name = "--repo", .value = "DIR", .help = "a repo", .needs = {"--to"}},
                           {.name = "--to", .value = "DIR", .help = "where to"}},
               .run = run},
              {.name = "items",
               .summary = "items",
               .subcommands = {{.name = "ls", .summary = "list items", .run = run},
                               {.name = "show",
                                .summary = "show one item",
                                .positionals = {{.name = "ID", .help = "the item"}},
                                .run = run},
                               {.name = "move",
                                .summary = "move an item",
                                .positionals = {{.name = "FROM", .help = "where it is"},
                                                {.name = "TO", .help = "where it goes"}},
                                .run = run}},
               .default_subcommand = "ls"},
          },
  };
}

// The InvalidArgument that parsing `args` throws.
InvalidArgument refusal(const std::vector<std::string>& args) {
  const Command program = test_program();
  try {
    parse_command_line(program, args);
  } catch (const InvalidArgument& e) {
    return e;
  }
  FAIL("accepted: prog" << [&] {
    std::string joined;
    for (const auto& a : args) joined += " " + a;
    return joined;
  }());
  throw std::logic_error("not reached");
}

// Checks that `args` are refused with a message containing `says`, naming `argument`.
void check_refused(const std::vector<std::string>& args, const std::string& says,
                   const std::string& argument) {
  const InvalidArgument e = refusal(args);
  INFO(e.what());
  CHECK_THAT(e.what(), Catch::Contains(says));
  CHECK(e.details().value("argument", "") == argument);
}

}  // namespace

TEST_CASE("parse_integer takes whole decimal integers within the range, nothing else") {
  CHECK(cli::parse_integer("42", "--n", kPositive) == 42);
  CHECK(cli::parse_integer("1", "--n", kPositive) == 1);
  CHECK(cli::parse_integer("2147483647", "--n", kPositive) == INT_MAX);
  CHECK(cli::parse_integer("-5", "--n", {-5, 5}) == -5);
  CHECK(cli::parse_integer("0", "--n", {-5, 5}) == 0);
  for (const char* bad : {"10abc", "", "-1", "0", "+1", " 1", "1 ", "1.5", "0x10", "1e3",
                          "2147483648", "99999999999999999999", "-99999999999999999999", "abc"}) {
    INFO("'" << bad << "'");
    try {
      cli::parse_integer(bad, "--n", kPositive);
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("--n must be a positive integer, got '"));
    }
  }
  CHECK_THROWS_WITH(cli::parse_integer("6", "--shift", {-5, 5}),
                    "--shift must be an integer from -5 to 5, got '6'");
}

TEST_CASE("options and positionals are read in any order, with fallbacks") {
  const Command program = test_program();
  auto line = parse_command_line(program, {"serve", "--dry-run", "--name=ada", "--offset", "-3"});
  REQUIRE(line.command != nullptr);
  CHECK(line.path == "prog serve");
  const Arguments& a = *line.arguments;
  CHECK(a.value("--name") == "ada");
  CHECK(a.integer("--offset") == -3);
  CHECK(a.integer("--every") == 60);  // the fallback
  CHECK_FALSE(a.given("--every"));
  CHECK(a.given("--dry-run"));
  CHECK_FALSE(a.text("--repo").has_value());

  line = parse_command_line(program, {"items", "move", "b", "--", "-a"});
  REQUIRE(line.command != nullptr);
  CHECK(line.path == "prog items move");
  CHECK(line.arguments->positional("FROM") == "b");
  CHECK(line.arguments->positional("TO") == "-a");  // after `--` everything is positional

  // A value starting with `--` is given with `=`.
  line = parse_command_line(program, {"serve", "--name=--odd"});
  CHECK(line.arguments->value("--name") == "--odd");
}

TEST_CASE("a group runs its default subcommand when given no arguments") {
  const Command program = test_program();
  const auto line = parse_command_line(program, {"items"});
  REQUIRE(line.command != nullptr);
  CHECK(line.path == "prog items ls");
}

TEST_CASE("every malformed argument is refused, naming it") {
  check_refused({"serve", "--name", "a", "--bogus-flag"}, "unknown option '--bogus-flag'",
                "--bogus-flag");
  check_refused({"serve", "--name", "a", "--bogus-flag=3"}, "unknown option '--bogus-flag'",
                "--bogus-flag");
  check_refused({"serve", "--name", "a", "-x"}, "unknown option '-x'", "-x");
  check_refused({"serve", "--name"}, "--name needs a value", "--name");
  check_refused({"serve", "--name", "--dry-run"}, "--name needs a value", "--name");
  check_refused({"serve", "--name", "a", "--dry-run=yes"}, "--dry-run takes no value",
                "--dry-run=yes");
  check_refused({"serve", "--name", "a", "--name", "b"}, "--name is given twice", "--name");
  check_refused({"serve", "--name", "a", "--dry-run", "--dry-run"}, "--dry-run is given twice",
                "--dry-run");
  check_refused({"serve", "--name", "a", "--every", "10abc"},
                "--every must be a positive integer, got '10abc'", "--every");
  check_refused({"serve", "--name", "a", "--every", "-1"}, "--every must be a positive integer",
                "--every");
  check_refused({"serve", "--name", "a", "--every", "99999999999999999999"},
                "--every must be a positive integer", "--every");
  check_refused({"serve", "--name", "a", "--every="}, "--every must be a positive integer, got ''",
                "--every");
  check_refused({"serve", "--name", "a", "--offset", "9"},
                "--offset must be an integer from -5 to 5", "--offset");
  check_refused({"serve"}, "--name is required", "--name");
  check_refused({"serve", "--name", "a", "--repo", "r"}, "--repo needs --to", "--repo");
  check_refused({"serve", "--name", "a", "extra"}, "unexpected argument 'extra'", "extra");
  check_refused({"items", "show"}, "missing ID", "ID");
  check_refused({"items", "show", "a", "b"}, "unexpected argument 'b' (takes only ID)", "b");
  check_refused({"items", "show", ""}, "ID is empty", "ID");
  check_refused({"items", "move", "a"}, "missing TO", "TO");
  check_refused({"items", "bogus"}, "unknown command 'bogus' (ls, show, move)", "bogus");
  check_refused({"items", "--bogus-flag"}, "unknown command '--bogus-flag'", "--bogus-flag");
  check_refused({"bogus"}, "unknown command 'bogus'", "bogus");
  // An unknown option is named even when something required is missing too.
  check_refused({"items", "move", "--bogus-flag"}, "unknown option '--bogus-flag'", "--bogus-flag");
  // A very long argument is quoted shortened.
  const InvalidArgument e = refusal({"serve", "--" + std::string(1000, 'x')});
  CHECK(std::string(e.what()).size() < 120);
  CHECK(refusal({"items", "show"}).details().value("command", "") == "prog items show");
}

TEST_CASE(
    "--help or -h anywhere asks for the usage of the command named so far, and runs nothing") {
  bool ran = false;
  const Command program = test_program(&ran);
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"serve", "--help"},
                                             {"serve", "-h"},
                                             {"serve", "--every", "10abc", "--help"},
                                             {"serve", "--bogus-flag", "-h"},
                                             {"--help", "serve"}}) {
    const auto line = parse_command_line(program, args);
    CHECK(line.command == nullptr);
    CHECK_THAT(line.usage, Catch::StartsWith(args[0] == "--help" ? "usage: prog COMMAND"
                                                                 : "usage: prog serve"));
  }
  auto line = parse_command_line(program, {"items", "--help"});
  CHECK(line.command == nullptr);
  CHECK_THAT(line.usage, Catch::StartsWith("usage: prog items COMMAND"));
  line = parse_command_line(program, {"items", "show", "--help"});
  CHECK_THAT(line.usage, Catch::StartsWith("usage: prog items show ID"));
  // After `--`, `--help` is an ordinary positional.
  line = parse_command_line(program, {"items", "show", "--", "--help"});
  REQUIRE(line.command != nullptr);
  CHECK(line.arguments->positional("ID") == "--help");
  // Parsing never runs a command.
  CHECK_FALSE(ran);
  line.command->run(*line.arguments);
  CHECK(ran);
}

TEST_CASE("usage is written from the declarations") {
  const Command program = test_program();
  const std::string serve = cli::usage(program.subcommands[0], "prog serve");
  CHECK_THAT(serve, Catch::StartsWith("usage: prog serve [--every S] [--offset N] --name NAME "
                                      "[--dry-run] [--repo DIR] [--to DIR]\n"));
  CHECK_THAT(serve, Catch::Contains("serve things"));
  CHECK_THAT(serve, Catch::Contains("--every S"));
  CHECK_THAT(serve, Catch::Contains("seconds between rounds (a positive integer; default 60)"));
  CHECK_THAT(serve, Catch::Contains("a shift (an integer from -5 to 5)"));
  CHECK_THAT(serve, Catch::Contains("who (required)"));
  CHECK_THAT(serve, Catch::Contains("a repo (needs --to)"));
  CHECK_THAT(serve, Catch::Contains("-h, --help"));

  const std::string all = cli::usage(program, "prog");
  CHECK_THAT(all, Catch::StartsWith("usage: prog COMMAND [ARGS]\n"));
  for (const char* entry : {"\n  serve [--every S]", "\n  items ls ", "\n  items show ID ",
                            "\n  items move FROM TO "}) {
    CHECK_THAT(all, Catch::Contains(entry));
  }
  const std::string items = cli::usage(program.subcommands[1], "prog items");
  CHECK_THAT(items, Catch::Contains("\n  show ID "));
  CHECK_THAT(items, Catch::Contains("`prog items` alone is `prog items ls`"));
  // Lines wrap at 100 columns.
  for (const std::string& text : {serve, all, items}) {
    std::size_t start = 0;
    while (start < text.size()) {
      const std::size_t end = text.find('\n', start);
      CHECK(end - start <= 100);
      start = end + 1;
    }
  }
}

TEST_CASE("reading what a command does not declare is a programming error") {
  const Command program = test_program();
  const auto line = parse_command_line(program, {"serve", "--name", "a"});
  CHECK_THROWS_AS(line.arguments->text("--nmae"), std::logic_error);
  CHECK_THROWS_AS(line.arguments->integer("--name"), std::logic_error);  // not an integer
  CHECK_THROWS_AS(line.arguments->value("--repo"), std::logic_error);    // may be absent
  CHECK_THROWS_AS(line.arguments->positional("ID"), std::logic_error);
}

TEST_CASE("declarations that contradict themselves are programming errors") {
  const auto program_with = [](cli::Option option) {
    return Command{
        .name = "prog",
        .subcommands = {{.name = "x", .options = {std::move(option)}, .run = [](const Arguments&) {
                           return 0;
                         }}}};
  };
  for (const cli::Option& bad : std::vector<cli::Option>{
           {.name = "-x", .value = "V"},
           {.name = "--help"},
           {.name = "--a", .value = "N", .integer = kPositive, .fallback = "0"},
           {.name = "--a", .value = "V", .needs = {"--undeclared"}},
           {.name = "--a", .integer = kPositive},
           {.name = "--a", .value = "V", .required = true, .fallback = "v"},
       }) {
    INFO(bad.name);
    const Command program = program_with(bad);
    CHECK_THROWS_AS(parse_command_line(program, {"x"}), std::logic_error);
  }
}
