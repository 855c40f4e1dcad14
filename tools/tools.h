// The reference bot's tools: read_file, write_file, bash and git_push, each run in the run's own
// sandbox directory, <sandbox_root>/<run_id>/ (created on demand).
//
// Contract:
//  - run() never throws for a bad call: an unknown tool, a missing or ill-typed argument, a path
//    that leaves the sandbox, an I/O error all come back as StepOutcome::failure naming the cause.
//  - Effect classes (settlement/): read_file is pure, write_file idempotent, bash and git_push
//    unsafe. Paths of read_file/write_file are relative: an absolute path or a `..` component is
//    refused before anything is touched, and so is one that resolves outside the sandbox through
//    a symlink.
//  - An unsafe tool appends "<effect_key> <tool> <generation>\n" to ToolsOptions::effects_log
//    BEFORE it acts: one write() on an O_APPEND descriptor (lines of concurrent processes never
//    interleave), then fsync. If that line cannot be written the tool does not run. Every call
//    logs its own line, so a repeated effect is countable.
//  - The fencing token reaches the tool: bash and git_push run in a child process (fork/execve,
//    cwd = the sandbox) whose environment is the inherited one plus RUNLEDGER_EFFECT_KEY
//    ("<run_id>/<step_no>", stable across generations), RUNLEDGER_GENERATION and RUNLEDGER_RUN_ID.
//    A downstream system keying its writes on the effect key and refusing a generation older than
//    one it has seen refuses a zombie's late call.
//  - Child output (stdout and stderr merged) is captured up to 1 MiB; beyond that it is drained
//    and dropped, and a truncation note is appended. Exit status 0 is success(output), anything
//    else failure("exit N: " + output) (or "signal N: "). No time limit is applied. Background
//    processes the command leaves behind are not waited for once the command itself has exited.
//
// Thread-safety: Tools is immutable after construction and run() is thread-safe (the child is
// started with only async-signal-safe calls between fork and exec). Concurrent calls of one run
// share its sandbox directory.
#pragma once

#include <filesystem>

#include "settlement/settlement.h"
#include "transcript/transcript.h"

namespace runledger::tools {

struct ToolsOptions {
  std::filesystem::path sandbox_root;  // each run works in <sandbox_root>/<run_id>/
  std::filesystem::path effects_log;   // unsafe tools append "<effect_key> <tool> <generation>\n"
};

class Tools {
 public:
  explicit Tools(ToolsOptions options);

  // Runs one call in the run's sandbox. Unknown tool -> StepOutcome::failure("unknown tool ...").
  transcript::StepOutcome run(const settlement::ToolCall& call,
                              const settlement::ToolContext& context) const;

 private:
  ToolsOptions options_;
};

}  // namespace runledger::tools
