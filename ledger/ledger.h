// The run ledger: live_runs with leases on the database clock and a fencing generation.
//
// Contract:
//  - dispatch() is idempotent on dispatch_key: the same key returns the same run (created =
//    false), forever within retention, whatever else the second request says. At most one live
//    (queued or running) run per thread_key: a second is a Conflict naming the live run.
//  - A claim sets status running, generation + 1, the owner, and lease = database now() +
//    lease_ttl. Only the generation decides whether a write lands; the lease only decides when
//    another process may claim (invariant 2).
//  - Every owner write (heartbeat, finish, release, write_fenced) lands only while the run is
//    running under the writer's generation, and is serialized against claims through the run
//    row's lock (invariant 1): a claim that commits first makes the write throw FencedError; a
//    write that commits first is visible to the claimer. FencedError is a hard stop for the
//    writer: it no longer owns the run.
//  - Every terminal status write (finish, cancel, any other) inserts the parent instance's
//    run-finished event into wf_events in the same transaction and NOTIFYs channel
//    `runledger_wf_events` with the instance id (invariant 6; done by a trigger, see
//    migrations/0001_ledger.sql). The event's dedupe key is "run-finished:<run_id>".
//  - Reads page newest first (paging/paging.h): runs_with_status(), runs_in_thread() and
//    runs_of_requester() list runs by created_at, ties broken by run id, each one statement that
//    an index of migration 0015 serves from the cursor on.
//  - No transaction stays open across anything but database work.
//  - Expected outcomes are thrown as runledger::Error subclasses (errors/errors.h).
//
// Thread-safety: Ledger is thread-safe (each call borrows its own pooled connection).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ids/ids.h"
#include "paging/paging.h"
#include "pg/pg.h"

namespace runledger::ledger {

enum class RunStatus { queued, running, finished, failed, interrupted, cancelled };
std::string_view to_string(RunStatus status);
// Throws InvalidArgument for an unknown name.
RunStatus parse_run_status(std::string_view name);
bool is_terminal(RunStatus status);

// A process that owns runs: its stable slot name and this start's incarnation.
struct Owner {
  SlotName slot;
  IncarnationId incarnation;
};

struct Budget {
  int wall_s;     // wall-clock seconds the run may take from its creation
  int max_steps;  // tool calls the run may make in all
};

struct Options {
  // Lease length granted by claims and heartbeats, on the database clock.
  std::chrono::milliseconds lease_ttl{30'000};
  // Budget of a dispatch that names none.
  Budget default_budget{3'600, 200};
  // The largest budget a dispatch may ask for.
  Budget max_budget{7 * 24 * 3'600, 10'000};
  // Runs dispatched by a run or an instance have depth 1; deeper is refused.
  int max_depth = 1;
  // Live (queued or running) children one parent run or instance may have at once.
  int max_live_children = 8;
  // The largest profile JSON accepted, serialized.
  std::size_t max_profile_bytes = 256 * 1024;
  // The largest system prompt accepted.
  std::size_t max_system_prompt_bytes = 4u << 20;
  // The largest input JSON accepted, serialized.
  std::size_t max_input_bytes = 1u << 20;
  // Terminal runs older than this are deleted by sweep_retention().
  std::chrono::seconds retention{std::chrono::hours(7 * 24)};
};

struct DispatchRequest {
  std::string dispatch_key;  // 1-255 characters, no control characters
  std::string thread_key;    // same rules
  std::string requester;     // same rules
  nlohmann::json profile = nlohmann::json::object();
  std::optional<Budget> budget;  // Options::default_budget when absent
  std::optional<RunId> parent_run;
  std::optional<std::string> parent_instance;  // 1-255 characters of [A-Za-z0-9_.:-]
  // Bytes, stored and returned exactly (transcript::Store::system_prompt); never changed later.
  std::string system_prompt;
  // Any JSON the run is given to work on; null: none. Stored with the run, never changed later.
  nlohmann::json input = nullptr;
};

struct Run {
  RunId run_id;
  std::string dispatch_key;
  std::string thread_key;
  std::optional<RunId> parent_run;
  std::optional<std::string> parent_instance;
  int depth;
  std::string requester;
  nlohmann::json profile;
  RunStatus status;
  Generation generation;
  std::optional<Owner> owner;
  std::optional<std::string> lease_expires_at;  // timestamps: PostgreSQL text, UTC
  int takeovers;
  Budget budget;
  std::string created_at;
  std::optional<std::string> claimed_at;
  std::optional<std::string> finished_at;
  nlohmann::json result;  // null until terminal
  nlohmann::json input;   // null when the dispatch gave none
};

// The run as JSON (the shape the CLI prints; the HTTP API adds its transcript head and step
// count). Timestamps are RFC 3339 in UTC (timestamps/timestamps.h). An owner's slot is printed as
// it was claimed for: `slot` without the namespace prefix, and `via` "http" for a slot of the HTTP
// namespace (kHttpSlotPrefix), else "database".
nlohmann::json to_json(const Run& run);

// Runs claimed over HTTP carry owner slot "http:<slot>": HTTP slots are a namespace of their own,
// so an HTTP claim never takes the runs of a bot holding a database slot (boot/ refuses the
// prefix for database slots).
inline constexpr std::string_view kHttpSlotPrefix = "http:";

struct Dispatched {
  Run run;
  bool created;
};

struct Claim {
  Run run;          // as claimed: run.generation is the caller's fencing token
  bool taken_over;  // taken from another owner mid-run: settle it before the loop continues
};

struct RunFilter {
  std::optional<RunStatus> status;
  std::optional<std::string> thread_key;
  std::optional<RunId> parent_run;
  std::optional<std::string> parent_instance;
  int limit = 100;  // newest first; 1-1000
};

struct StatusCount {
  RunStatus status;
  std::int64_t runs;
};

class Ledger {
 public:
  Ledger(pg::Pool& pool, Options options = {});

  Dispatched dispatch(const DispatchRequest& request);

  // Claims up to `max` queued runs or runs whose lease expired, skipping rows locked by others.
  std::vector<Claim> claim_next(const Owner& owner, int max);
  // Like claim_next, for runs whose lease expired only (queued runs are left alone).
  std::vector<Claim> claim_expired(const Owner& owner, int max);
  // Claims one run if it is queued or its lease expired, waiting for in-flight writes to it.
  // Conflict when it is leased by a live owner or terminal; NotFound when unknown.
  Claim claim(const Owner& owner, const RunId& run);
  // Claims running runs held by another incarnation of owner.slot, leases or not, oldest first,
  // at most `max`. Only for a process that has proven that incarnation dead (it holds the slot),
  // or replaced it for good (an HTTP slot's newer incarnation).
  std::vector<Claim> take_over_slot(const Owner& owner, int max = kAllRuns);
  static constexpr int kAllRuns = 1 << 30;

  // Extends the leases of `runs` in one statement; returns the runs that are lost (another
  // generation owns them, or they ended): their owner must stop them at once.
  std::vector<RunId> heartbeat(const Owner& owner,
                               const std::vector<std::pair<RunId, Generation>>& runs);
  struct Leases {
    std::vector<RunId> lost;
    std::optional<std::string> lease_expires_at;  // of the runs kept; none when none was kept
  };
  // heartbeat(), also saying until when the leases it kept now last.
  Leases extend_leases(const Owner& owner, const std::vector<std::pair<RunId, Generation>>& runs);

  // Writes the terminal record. The same finish repeated is a no-op; a different one after it is
  // a Conflict. `status` must be terminal.
  void finish(const RunId& run, Generation generation, RunStatus status,
              const nlohmann::json& result);
  // Hands the run back (queued, no lease) for an immediate re-claim by anyone.
  void release(const RunId& run, Generation generation);
  // Runs `body` in one transaction that first locks the run row FOR SHARE under `generation`;
  // FencedError (and `body` never runs) if the generation no longer owns the run. The lock is
  // what serializes the body's writes against claims.
  void write_fenced(const RunId& run, Generation generation,
                    const std::function<void(pqxx::work&)>& body);

  // For modules whose own fenced writes changed nothing: throws NotFound, or FencedError naming
  // the writer's and the current generation and status.
  [[noreturn]] void throw_refused(const RunId& run, Generation generation, std::string_view action);

  // An operator ends a run of any owner: cancelled, the generation bumped so the owner's next
  // write is fenced. Cancelling a cancelled run is a no-op; a run that ended otherwise is a
  // Conflict.
  void cancel(const RunId& run, std::string_view by);

  Run get(const RunId& run);
  // The status of each of `runs`, in one statement (runs that do not exist are left out).
  std::vector<std::pair<RunId, RunStatus>> statuses(const std::vector<RunId>& runs);
  std::vector<Run> list(const RunFilter& filter);

  // Pages of runs, newest first (created_at, then run id). InvalidArgument for a cursor another
  // listing made (or none made), a limit outside 1-1000, or a thread key or requester that no
  // dispatch accepts.
  paging::Page<Run> runs_with_status(RunStatus status, const paging::PageRequest& page);
  paging::Page<Run> runs_in_thread(std::string_view thread_key, const paging::PageRequest& page);
  paging::Page<Run> runs_of_requester(std::string_view requester, const paging::PageRequest& page);
  // How many runs have each status, for the statuses some run has, in the order of RunStatus.
  std::vector<StatusCount> count_by_status();

  // Deletes terminal runs that finished more than Options::retention ago, in batches; returns
  // how many it deleted.
  std::int64_t sweep_retention();

  const Options& options() const { return options_; }

 private:
  int lock_parent_and_check_fan_out(pqxx::work& tx, const DispatchRequest& request) const;
  paging::Page<Run> runs_page(const pg::Statement& statement, const paging::Listing& listing,
                              const std::string& key, const paging::PageRequest& page);

  pg::Pool& pool_;
  Options options_;
};

}  // namespace runledger::ledger
