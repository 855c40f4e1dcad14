// A bot process's life around its runs: slot, boot-time reclaim, heartbeats, self-fencing and
// the SIGTERM handoff (docs/design.md, invariants 7 and 8).
//
// Contract:
//  - A process has a slot name (configured) and mints a fresh incarnation id at each start. It
//    holds its slot through a PostgreSQL session advisory lock on a dedicated connection; a second
//    live process with the same slot is refused with Conflict after Options::slot_wait (a killed
//    predecessor's backend can hold the lock for a moment after its `kill -9`). libpqxx 6.4
//    reconnects silently, which would drop the lock unseen, so every heartbeat checks the slot
//    connection's backend pid; a change is a lost slot and every run stops at once.
//  - boot(): holding the slot proves the slot's previous incarnation dead, so its runs are taken
//    over at once (no lease wait); then expired leases of other slots are claimed up to capacity;
//    every run taken over is settled (settlement/) before any driver starts, and only then does
//    the process take new work. The boot is logged as a short timeline.
//  - One batched heartbeat per process every lease_ttl / 3. A run reported lost is stopped at
//    once (hard stop: its driver sees lost() and must not write again).
//  - may_start_tool(): before any tool, the time since the last good heartbeat (monotonic clock)
//    is checked; past lease_ttl - safety_margin nothing starts until the leases are re-verified.
//    This stops a process that was SIGSTOPped past its lease, or cut off from the database.
//  - request_stop() (SIGTERM): no new claims; each driver returns at its next safe point (between
//    tool calls) within handoff_grace, and those runs are released for an immediate re-claim. A
//    run still inside a tool at the end of the grace is left to lease expiry, never released.
//    Whoever claims a run that is past its first generation settles it before driving it (a
//    call of the last turn that had not started yet then runs).
//  - Runs are multiplexed over a small connection pool (Options::pool_size), not one connection
//    per run.
//  - A transient database failure (Unavailable) is never a run's outcome: heartbeats, claims and
//    settlements retry it (bounded, jittered backoff); a driver that gives up on one is
//    re-settled and driven again from the record while the run is still ours, and otherwise the
//    run is left to its lease.
//  - Lifetime: a run's worker shares ownership of what it touches (the process's state, its
//    ledger, store and pool, the driver, its RunContext). Destroying a Process (or leaving run()
//    by an exception, e.g. a lost slot) while a worker is inside a tool detaches that worker: the
//    slot is given up at once, the run is left to lease expiry as in a handoff, and the tool
//    returns into live objects (its next may_start_tool() is false; its writes are fenced).
//
// Thread-safety: request_stop() is async-signal-safe. RunContext methods are thread-safe. The
// rest is called from the thread that owns the Process.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ids/ids.h"
#include "ledger/ledger.h"
#include "pg/pg.h"
#include "settlement/settlement.h"
#include "transcript/transcript.h"

namespace runledger::boot {

struct Options {
  SlotName slot{"bot-1"};
  // Runs driven at once (each on its own worker thread).
  int capacity = 64;
  // Database connections shared by every run of the process; boot settles reclaimed runs on
  // pool_size - 1 threads.
  int pool_size = 8;
  // How long to retry taking the slot before refusing to start.
  std::chrono::milliseconds slot_wait{5'000};
  // Time runs get to reach a safe point after request_stop().
  std::chrono::milliseconds handoff_grace{10'000};
  // No tool starts once the last good heartbeat is older than lease_ttl minus this.
  std::chrono::milliseconds safety_margin{5'000};
  // How often to look for new work when no NOTIFY wakes the process.
  std::chrono::milliseconds poll_interval{500};
  // How long a statement of this process waits for a row lock before it fails (Unavailable).
  std::chrono::milliseconds lock_timeout{5'000};
  // Retries of work that met a transient database failure (settling, re-driving a run).
  pg::Backoff unavailable_backoff;
  settlement::Options settlement;
};

// What a driver sees of the run it drives.
class RunContext {
 public:
  virtual ~RunContext() = default;
  virtual const ledger::Claim& claim() const = 0;
  virtual const settlement::Resume& resume() const = 0;
  // The run is no longer ours (another generation owns it, or it ended): stop, write nothing.
  virtual bool lost() const = 0;
  // A SIGTERM asked the process to hand its runs off: return at the next safe point.
  virtual bool stop_requested() const = 0;
  // True when a tool may start now (the lease is fresh, re-verified if need be, and the run is
  // still ours). Drivers call it right before every tool.
  virtual bool may_start_tool() = 0;
  // The process's ledger and store, for the driver's writes. They stay valid while the driver
  // holds the context, even after the Process object is destroyed.
  virtual ledger::Ledger& ledger() = 0;
  virtual transcript::Store& store() = 0;
};

// The bot's side of a run.
class RunDriver {
 public:
  virtual ~RunDriver() = default;
  // The callbacks settlement uses to read turns and re-run tools. Called from several threads
  // at once (boot settles reclaimed runs side by side), each for a different run.
  virtual settlement::Callbacks callbacks(const ledger::Run& run) = 0;
  // Drives the run until it finishes (the driver writes the terminal record), is lost, or a stop
  // is requested at a safe point. Returns true when it stopped at a safe point (the run may be
  // released), false when it finished or was lost. Unavailable thrown out of it means "not now":
  // the run is settled and driven again after a backoff while it is still ours.
  virtual bool drive(RunContext& context) = 0;
};

// One line of the boot timeline.
struct TimelineEvent {
  std::chrono::milliseconds at;  // since the Process was constructed
  std::string what;
};

struct HeldRun;  // private to boot/

class Process {
 public:
  // The driver is shared with the run workers, which may outlive the Process (see Lifetime).
  Process(std::string database_url, ledger::Options ledger_options,
          transcript::Options transcript_options, settlement::EffectClasses classes,
          Options options, std::shared_ptr<RunDriver> driver);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Takes the slot, reclaims and settles, starts the heartbeat and the drivers of reclaimed runs.
  void boot();
  // Claims and drives new work until request_stop(); then hands off and returns.
  void run();
  // Async-signal-safe.
  void request_stop();

  const ledger::Owner& owner() const;
  std::vector<TimelineEvent> timeline() const;
  ledger::Ledger& ledger();
  transcript::Store& store();

 private:
  friend struct HeldRun;
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace runledger::boot
