// The write-ahead record of a run: its transcript (what the model said) and its step record
// (which tool calls ran). One module owns both tables because the loop's hot path writes both in
// one statement.
//
// Contract:
//  - Transcript entries are bytes: stored as bytea and returned as the same bytes, never parsed,
//    normalized or re-serialized. Entries are numbered 1, 2, ... per run and chained:
//      sha256 = SHA-256(previous sha256 || be64(seq) || kind || 0x00 || body),
//    the first on 32 zero bytes. The head (seq, sha256) is kept on the run row and moves in the
//    same statement as each append, so verify() detects a modified entry and a deleted tail.
//  - A step's intent is durable before its tool starts; begin_step() returning is the last check
//    before a tool may run. Its effect_key, "<run_id>/<step_no>", is stable across generations.
//    step_no counts the run's tool calls across generations; a duplicate is a Conflict, never an
//    overwrite. An intent past the run's budget (max_steps, wall_s) is refused with
//    BudgetExhausted, and the run is finished `failed` with {"error": "budget_exhausted"}.
//  - Completions record the generation that wrote them (a pure step re-run by a successor has an
//    old intent generation and a new result generation). Repeating the identical completion is a
//    no-op; a different one is a Conflict.
//  - Every write is fenced by generation exactly like the ledger's owner writes (FencedError).
//  - Hot path, one statement (one round trip, one commit) each: append_turn() = the assistant
//    turn + the intents of its tool calls; complete_with_result() = a completion + its
//    tool_result entry. A step records the seq of its tool_result entry (result_seq), so a
//    result that never reached the transcript is found without parsing transcript bytes.
//  - read() streams: memory is bounded by Options::read_page_entries * read_slice_bytes plus the
//    largest single entry, whatever the transcript's size.
//  - Reads for a dashboard, one statement each: summary() (entry count, total bytes and head,
//    reading no entry's body) and step_timeline() (the steps in step order, without their args
//    and results, paged by step_no: paging/paging.h).
//
// Thread-safety: Store is thread-safe (each call borrows its own pooled connection).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "digest/digest.h"
#include "ids/ids.h"
#include "ledger/ledger.h"
#include "paging/paging.h"
#include "pg/pg.h"

namespace runledger::transcript {

enum class EntryKind { system, user, assistant, tool_result, synthetic };
std::string_view to_string(EntryKind kind);
EntryKind parse_entry_kind(std::string_view name);  // InvalidArgument when unknown

// The chain link of one entry.
digest::Sha256Digest chain(const digest::Sha256Digest& previous, std::int64_t seq, EntryKind kind,
                           std::string_view body);

struct Head {
  std::int64_t seq;  // 0: no entries yet
  digest::Sha256Digest sha256;
};

struct Entry {
  std::int64_t seq;
  Generation generation;
  EntryKind kind;
  std::string body;  // the exact bytes appended
  digest::Sha256Digest sha256;
  std::string created_at;
};

struct Verification {
  bool ok;
  std::int64_t entries;                       // entries read
  std::optional<std::int64_t> first_bad_seq;  // the first entry that does not verify
  std::string problem;                        // empty when ok
};

enum class StepState { intent, done, failed, settled };
std::string_view to_string(StepState state);

struct StepIntent {
  StepNo step_no;
  std::string tool;     // 1-255 bytes
  std::string call_id;  // the model's id for the call, 1-255 bytes
  nlohmann::json args = nlohmann::json::object();
};

// How a tool call ended: the tool's output bytes, or an error message, or settled (below).
struct StepOutcome {
  static StepOutcome success(std::string result) {
    return {StepState::done, std::move(result), {}};
  }
  static StepOutcome failure(std::string error) {
    return {StepState::failed, {}, std::move(error)};
  }
  // For a call in flight when its process died that must not run again: the settlement's message
  // stands as its result.
  static StepOutcome settled(std::string message) {
    return {StepState::settled, std::move(message), {}};
  }
  StepState state;
  std::string result;
  std::string error;
};

struct Step {
  StepNo step_no;
  Generation intent_generation;
  std::optional<Generation> result_generation;
  std::string tool;
  std::string call_id;
  nlohmann::json args;
  std::string effect_key;
  StepState state;
  std::optional<std::string> result;
  std::optional<std::string> error;
  nlohmann::json settlement;               // how settlement handled it; null when it did not
  std::optional<std::int64_t> result_seq;  // the transcript entry carrying its tool_result
  std::string started_at;
  std::optional<std::string> finished_at;
};

// What a run's transcript holds, without reading it.
struct Summary {
  std::int64_t entries;  // entries stored
  std::int64_t bytes;    // the total size of their bodies
  Head head;             // as kept on the run row
};

// One step of a run's timeline: what it is, where it stands and when, without its args, result or
// error (steps() has those).
struct TimelineStep {
  StepNo step_no;
  std::string tool;
  std::string call_id;
  std::string effect_key;
  StepState state;
  Generation intent_generation;
  std::optional<Generation> result_generation;
  // How settlement handled the step ({"rule", "generation", "effect_class"}); null when it did
  // not. The step record holds no other effect class: the bot's configuration classifies tools
  // (settlement::EffectClasses).
  nlohmann::json settlement;
  std::string started_at;
  std::optional<std::string> finished_at;
};

struct TurnWritten {
  std::int64_t seq;                      // of the assistant entry
  std::vector<std::string> effect_keys;  // one per intent, in order
};

struct Options {
  // The largest entry accepted.
  std::size_t max_entry_bytes = 64u << 20;
  // The largest step result accepted.
  std::size_t max_result_bytes = 64u << 20;
  // The largest args JSON accepted, serialized.
  std::size_t max_args_bytes = 1u << 20;
  // read(): entries fetched per round trip, and the slice a large entry is fetched in.
  int read_page_entries = 16;
  std::size_t read_slice_bytes = 256u << 10;
};

class Store {
 public:
  // `ledger` finishes runs whose budget is exhausted.
  Store(pg::Pool& pool, ledger::Ledger& ledger, Options options = {});

  // Appends one entry; returns its seq.
  std::int64_t append(const RunId& run, Generation generation, EntryKind kind,
                      std::string_view body);
  // An append that lands only as entry `expected_seq` (none: as the next entry, whatever its
  // seq), returning the new head. Safe to repeat: when the entry at expected_seq is already the
  // identical one (kind, body and generation: this very append, whose answer was lost), it is
  // returned and nothing is written; Conflict when it is another entry, or when the transcript
  // does not end at expected_seq - 1.
  Head append_at(const RunId& run, Generation generation, EntryKind kind, std::string_view body,
                 std::optional<std::int64_t> expected_seq);
  Head head(const RunId& run);
  // The head seq of each of `runs`, in one statement (runs that do not exist are left out): what
  // a watcher of many runs polls.
  std::vector<std::pair<RunId, std::int64_t>> head_seqs(const std::vector<RunId>& runs);
  // Calls `fn` for each entry with seq >= from_seq, in order.
  void read(const RunId& run, std::int64_t from_seq, const std::function<void(const Entry&)>& fn);
  // The same, until `fn` returns false.
  void read_while(const RunId& run, std::int64_t from_seq,
                  const std::function<bool(const Entry&)>& fn);
  Verification verify(const RunId& run);
  // The bytes given at dispatch (empty when none were).
  std::string system_prompt(const RunId& run);

  // Writes one intent; returns its effect_key. The identical intent repeated returns the same key.
  std::string begin_step(const RunId& run, Generation generation, const StepIntent& intent);
  void complete_step(const RunId& run, Generation generation, StepNo step,
                     const StepOutcome& outcome);
  std::vector<Step> steps(const RunId& run);
  // One past the highest step_no recorded (1 for a run without steps).
  StepNo next_step_no(const RunId& run);

  TurnWritten append_turn(const RunId& run, Generation generation, std::string_view assistant_turn,
                          const std::vector<StepIntent>& intents);
  // append_turn() landing only as entry `expected_seq`; a repeat of the identical turn (the same
  // entry and the same intents) returns what the first wrote, like append_at().
  TurnWritten append_turn_at(const RunId& run, Generation generation,
                             std::string_view assistant_turn,
                             const std::vector<StepIntent>& intents,
                             std::optional<std::int64_t> expected_seq);
  // Records on a step still in flight how settlement handled it, when the run's holder will run
  // it again itself (an HTTP bot): the step stays an intent until it is completed. FencedError,
  // NotFound, or Conflict when the step is not in flight.
  void record_settlement(const RunId& run, Generation generation, StepNo step,
                         const nlohmann::json& settlement);
  // `settlement`, when not null, is recorded on the step (which rule settled it, and so on).
  void complete_with_result(const RunId& run, Generation generation, StepNo step,
                            const StepOutcome& outcome, std::string_view tool_result,
                            const nlohmann::json& settlement = nullptr);
  // The tool_result entry of a completed step whose result never reached the transcript.
  std::int64_t append_tool_result(const RunId& run, Generation generation, StepNo step,
                                  std::string_view tool_result,
                                  const nlohmann::json& settlement = nullptr);

  // NotFound for an unknown run.
  Summary summary(const RunId& run);
  // For a page of runs, in one statement: each one's head and step count (runs that do not exist
  // are left out).
  struct RunRecord {
    Head head;
    std::int64_t steps;
  };
  std::vector<std::pair<RunId, RunRecord>> run_records(const std::vector<RunId>& runs);
  // The run's steps in step order, a page at a time; a run without steps (or none at all) has an
  // empty page. InvalidArgument for a cursor another listing made (or none made) or a limit
  // outside 1-1000.
  paging::Page<TimelineStep> step_timeline(const RunId& run, const paging::PageRequest& page);

  // The newest entry of `kind`, if any; and how many there are.
  std::optional<Entry> last_entry(const RunId& run, EntryKind kind);
  std::int64_t count_entries(const RunId& run, EntryKind kind);

 private:
  [[noreturn]] void explain_refused_intents(const RunId& run, Generation generation,
                                            const std::vector<StepIntent>& intents);
  // After an append at expected_seq changed nothing: returns when the entry there is the
  // identical one (its head: the seq and hash of that entry); throws FencedError, NotFound or
  // Conflict otherwise. none: the refusal was not about the seq (the caller explains it).
  std::optional<Head> explain_refused_at(const RunId& run, Generation generation, EntryKind kind,
                                         std::string_view body, std::int64_t expected_seq);
  Step read_step(const RunId& run, StepNo step);  // NotFound when it has no intent
  // The answer to a repeat of a turn whose entry is at `seq`: Conflict unless each intent is
  // recorded as given.
  TurnWritten repeated_turn(const RunId& run, std::int64_t seq,
                            const std::vector<StepIntent>& intents);
  // The run, if `generation` still owns it; FencedError (or NotFound) otherwise.
  ledger::Run still_owned(const RunId& run, Generation generation, std::string_view action);
  // Returns when the refused completion is the identical one already recorded.
  void explain_refused_completion(const RunId& run, Generation generation, StepNo step,
                                  const StepOutcome& outcome);

  pg::Pool& pool_;
  ledger::Ledger& ledger_;
  Options options_;
};

}  // namespace runledger::transcript
