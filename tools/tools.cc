#include "tools/tools.h"

#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "errors/errors.h"
#include "subprocess/subprocess.h"

namespace runledger::tools {
namespace {

namespace fs = std::filesystem;
using transcript::StepOutcome;

constexpr std::size_t kMaxOutput = 1u << 20;

// A required string argument; InvalidArgument (turned into a failure by run()) otherwise.
std::string string_arg(const settlement::ToolCall& call, const char* name) {
  if (!call.args.is_object()) {
    throw InvalidArgument(call.tool + ": arguments must be a JSON object");
  }
  const auto it = call.args.find(name);
  if (it == call.args.end()) {
    throw InvalidArgument(call.tool + ": missing argument `" + name + "`");
  }
  if (!it->is_string()) {
    throw InvalidArgument(call.tool + ": argument `" + name + "` must be a string");
  }
  return it->get<std::string>();
}

// A command-line word: non-empty, no NUL, not taken for an option.
std::string word_arg(const settlement::ToolCall& call, const char* name) {
  std::string value = string_arg(call, name);
  if (value.empty() || value.find('\0') != std::string::npos || value.front() == '-') {
    throw InvalidArgument(call.tool + ": argument `" + name +
                          "` must be non-empty, without NUL, and not start with '-'");
  }
  return value;
}

// The run's sandbox directory, created on demand, canonical.
fs::path sandbox_dir(const ToolsOptions& options, const settlement::ToolContext& context) {
  const fs::path dir = options.sandbox_root / context.run.value();
  fs::create_directories(dir);
  return fs::canonical(dir);
}

// `relative` inside `sandbox`: no absolute path, no `..`, and no symlink leading out.
fs::path inside(const fs::path& sandbox, const settlement::ToolCall& call) {
  const std::string text = string_arg(call, "path");
  if (text.empty() || text.find('\0') != std::string::npos) {
    throw InvalidArgument(call.tool + ": `path` must be non-empty and without NUL");
  }
  const fs::path relative(text);
  if (relative.is_absolute() || relative.has_root_path()) {
    throw InvalidArgument(call.tool + ": `path` must be relative to the sandbox: " + text);
  }
  for (const auto& part : relative) {
    if (part == "..") {
      throw InvalidArgument(call.tool + ": `path` must not contain `..`: " + text);
    }
  }
  const fs::path resolved = fs::weakly_canonical(sandbox / relative);
  const fs::path back = resolved.lexically_relative(sandbox);
  if (back.empty() || *back.begin() == "..") {
    throw InvalidArgument(call.tool + ": `path` leads out of the sandbox: " + text);
  }
  return sandbox / relative;
}

StepOutcome read_file(const settlement::ToolCall& call, const fs::path& sandbox) {
  const fs::path file = inside(sandbox, call);
  if (!fs::is_regular_file(file)) {
    return StepOutcome::failure("read_file: no such file: " + call.args["path"].get<std::string>());
  }
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    return StepOutcome::failure("read_file: cannot read " + call.args["path"].get<std::string>());
  }
  return StepOutcome::success(std::move(bytes));
}

StepOutcome write_file(const settlement::ToolCall& call, const fs::path& sandbox) {
  const fs::path file = inside(sandbox, call);
  const std::string content = string_arg(call, "content");
  if (file.has_parent_path()) fs::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out) {
    return StepOutcome::failure("write_file: cannot write " + call.args["path"].get<std::string>());
  }
  return StepOutcome::success("wrote " + std::to_string(content.size()) + " bytes");
}

// Logs the effect, then runs argv in the sandbox with the fencing token in its environment.
StepOutcome run_unsafe(const ToolsOptions& options, std::string_view tool,
                       const settlement::ToolContext& context, const fs::path& sandbox,
                       const std::vector<std::string>& argv) {
  const std::string generation = std::to_string(context.generation.value());
  if (context.effect_key.empty() ||
      context.effect_key.find_first_of(" \t\r\n") != std::string::npos) {
    throw InvalidArgument(std::string(tool) + ": effect key must be one non-empty word");
  }
  subprocess::append_line(options.effects_log,
                          context.effect_key + " " + std::string(tool) + " " + generation + "\n");
  subprocess::Spawn command(argv);
  command.env = {{"RUNLEDGER_EFFECT_KEY", context.effect_key},
                 {"RUNLEDGER_GENERATION", generation},
                 {"RUNLEDGER_RUN_ID", context.run.value()}};
  command.cwd = sandbox;
  command.output = subprocess::Output::capture;
  command.capture_limit = kMaxOutput;
  const subprocess::Completed child = subprocess::run(command);
  std::string output = child.output;
  if (child.truncated) {
    output += "\n[runledger: output truncated to " + std::to_string(kMaxOutput) + " bytes]";
  }
  if (child.exit.success()) return StepOutcome::success(std::move(output));
  return StepOutcome::failure(child.exit.to_string() + ": " + output);
}

}  // namespace

Tools::Tools(ToolsOptions options) : options_(std::move(options)) {}

transcript::StepOutcome Tools::run(const settlement::ToolCall& call,
                                   const settlement::ToolContext& context) const {
  try {
    if (call.tool == "read_file") {
      return read_file(call, sandbox_dir(options_, context));
    }
    if (call.tool == "write_file") {
      return write_file(call, sandbox_dir(options_, context));
    }
    if (call.tool == "bash") {
      const std::string command = string_arg(call, "command");
      if (command.find('\0') != std::string::npos) {
        throw InvalidArgument("bash: `command` must not contain NUL");
      }
      return run_unsafe(options_, "bash", context, sandbox_dir(options_, context),
                        {"/bin/sh", "-c", command});
    }
    if (call.tool == "git_push") {
      const std::string remote = word_arg(call, "remote");
      const std::string branch = word_arg(call, "branch");
      return run_unsafe(options_, "git_push", context, sandbox_dir(options_, context),
                        {"git", "push", remote, branch});
    }
    return StepOutcome::failure("unknown tool `" + call.tool + "`");
  } catch (const InvalidArgument& e) {
    return StepOutcome::failure(e.what());
  } catch (const std::system_error& e) {  // includes std::filesystem::filesystem_error
    return StepOutcome::failure(call.tool + ": " + e.what());
  }
}

}  // namespace runledger::tools
