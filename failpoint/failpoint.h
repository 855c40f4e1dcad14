// Named failpoints: places in the code where a test can crash or pause a process on purpose.
//
// Contract: hit("ledger.claim.before_commit") does nothing unless that name is armed. An armed
// point either ends the process at once with SIGKILL (Action::kill: no destructors, no commits,
// as a real crash) or blocks the calling thread until the test releases it (Action::pause).
// Points are armed in-process with arm(), or for child processes through the environment:
//   RUNLEDGER_FAILPOINTS="name=kill,other.name=kill@3"   (kill on the 3rd hit)
// read once by arm_from_environment(). A pause armed there is never released (nothing in the
// process knows to): it holds threads mid-operation until the process is killed.
//
// Cost when nothing is armed: one relaxed atomic load per hit.
// Thread-safety: all functions are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace runledger::failpoint {

enum class Action { kill, pause };

// Arms `name`: the `nth` hit (1-based) and every later one triggers `action`.
void arm(const std::string& name, Action action, std::uint64_t nth = 1);
void disarm(const std::string& name);
void disarm_all();

// Parses RUNLEDGER_FAILPOINTS; throws InvalidArgument (errors/errors.h) on a malformed spec.
void arm_from_environment();

// Number of threads currently paused at `name`; and a wait for the first to arrive.
int paused_at(const std::string& name);
bool wait_until_paused(const std::string& name, std::chrono::milliseconds timeout);
// Lets every thread paused at `name` continue (and disarms it).
void release(const std::string& name);

// Total hits of `name` since it was armed (armed points only).
std::uint64_t hits(const std::string& name);

namespace detail {
extern std::atomic<int> armed_count;
void hit_slow(std::string_view name);
}  // namespace detail

inline void hit(std::string_view name) {
  if (detail::armed_count.load(std::memory_order_relaxed) != 0) detail::hit_slow(name);
}

}  // namespace runledger::failpoint
