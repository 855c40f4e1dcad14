// The step record: intents before tools run, completions after, and the hot-path statements
// that write them together with transcript entries.
#include <algorithm>
#include <set>

#include "errors/errors.h"
#include "transcript/rows.h"
#include "transcript/statements.h"
#include "transcript/transcript.h"

namespace runledger::transcript {
namespace {

constexpr std::string_view kStateNames[] = {"intent", "done", "failed", "settled"};

StepState parse_step_state(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kStateNames); ++i) {
    if (kStateNames[i] == name) return static_cast<StepState>(i);
  }
  throw std::runtime_error("unknown step state in the database: " + std::string(name));
}

// The intents as the JSON array the statements take; validated first.
std::string intents_json(const std::vector<StepIntent>& intents, std::size_t max_args_bytes) {
  nlohmann::json out = nlohmann::json::array();
  std::set<std::int64_t> seen;
  for (const auto& i : intents) {
    if (i.step_no.value() < 1)
      throw InvalidArgument("step_no must be at least 1", {{"field", "step_no"}});
    if (!seen.insert(i.step_no.value()).second) {
      throw InvalidArgument("step_no " + std::to_string(i.step_no.value()) + " appears twice",
                            {{"field", "step_no"}});
    }
    check_key(i.tool, "tool");
    check_key(i.call_id, "call_id");
    if (i.args.dump().size() > max_args_bytes) {
      throw InvalidArgument(
          "args of " + i.call_id + " are larger than " + std::to_string(max_args_bytes) + " bytes",
          {{"field", "args"}});
    }
    out.push_back({{"step_no", i.step_no.value()},
                   {"tool", i.tool},
                   {"call_id", i.call_id},
                   {"args", i.args}});
  }
  return out.dump();
}

std::optional<std::string> json_or_null(const nlohmann::json& j) {
  return j.is_null() ? std::nullopt : std::optional<std::string>(j.dump());
}

std::int64_t highest_step(const std::vector<StepIntent>& intents) {
  std::int64_t highest = 0;
  for (const auto& i : intents) highest = std::max(highest, i.step_no.value());
  return highest;
}

void check_outcome(const StepOutcome& outcome, std::size_t max_result_bytes) {
  if (outcome.state == StepState::intent) throw InvalidArgument("a completion cannot be an intent");
  if (outcome.result.size() > max_result_bytes) {
    throw InvalidArgument(
        "step result is larger than " + std::to_string(max_result_bytes) + " bytes",
        {{"field", "result"}});
  }
}

std::optional<std::string> optional_text(const pqxx::field& f) {
  return f.is_null() ? std::nullopt : std::optional<std::string>(f.as<std::string>());
}

std::optional<Generation> optional_generation(const pqxx::field& f) {
  return f.is_null() ? std::nullopt : std::optional<Generation>(Generation(f.as<std::int64_t>()));
}

// A jsonb column selected as text; JSON null for SQL NULL.
nlohmann::json json_field(const pqxx::field& f) {
  return f.is_null() ? nlohmann::json() : nlohmann::json::parse(f.as<std::string>());
}

Step step_from_row(const pqxx::row& row) {
  return Step{
      StepNo(row["step_no"].as<std::int64_t>()),
      Generation(row["intent_generation"].as<std::int64_t>()),
      optional_generation(row["result_generation"]),
      row["tool"].as<std::string>(),
      row["call_id"].as<std::string>(),
      nlohmann::json::parse(row["args"].as<std::string>()),
      row["effect_key"].as<std::string>(),
      parse_step_state(row["state"].as<std::string>()),
      row["result"].is_null() ? std::nullopt
                              : std::optional<std::string>(bytes_from(row["result"])),
      optional_text(row["error"]),
      json_field(row["settlement"]),
      row["result_seq"].is_null()
          ? std::nullopt
          : std::optional<std::int64_t>(row["result_seq"].as<std::int64_t>()),
      row["started_at"].as<std::string>(),
      optional_text(row["finished_at"]),
  };
}

TimelineStep timeline_step_from_row(const pqxx::row& row) {
  return TimelineStep{
      .step_no = StepNo(row["step_no"].as<std::int64_t>()),
      .tool = row["tool"].as<std::string>(),
      .call_id = row["call_id"].as<std::string>(),
      .effect_key = row["effect_key"].as<std::string>(),
      .state = parse_step_state(row["state"].as<std::string>()),
      .intent_generation = Generation(row["intent_generation"].as<std::int64_t>()),
      .result_generation = optional_generation(row["result_generation"]),
      .settlement = json_field(row["settlement"]),
      .started_at = row["started_at"].as<std::string>(),
      .finished_at = optional_text(row["finished_at"]),
  };
}

// Step numbers are unique per run: the timeline is ordered by them alone.
constexpr paging::Listing kStepTimelineListing{"step_timeline", false, paging::is_integer_id};

// Runs a completion statement with the outcome's result or error as the non-NULL one.
template <class... Extra>
pqxx::result exec_completion(pqxx::transaction_base& tx, const pg::Statement& s, const RunId& run,
                             Generation generation, StepNo step, const StepOutcome& outcome,
                             Extra&&... extra) {
  const std::string state(to_string(outcome.state));
  if (outcome.state != StepState::failed) {
    return pg::exec(tx, s, run.value(), generation.value(), step.value(), state,
                    bytes_param(outcome.result), nullptr, std::forward<Extra>(extra)...);
  }
  return pg::exec(tx, s, run.value(), generation.value(), step.value(), state, nullptr,
                  outcome.error, std::forward<Extra>(extra)...);
}

}  // namespace

std::string_view to_string(StepState state) {
  return kStateNames[static_cast<int>(state)];
}

std::string Store::begin_step(const RunId& run, Generation generation, const StepIntent& intent) {
  const std::vector<StepIntent> intents = {intent};
  const std::string json = intents_json(intents, options_.max_args_bytes);
  auto conn = pool_.acquire();
  try {
    pqxx::nontransaction tx(*conn);
    const auto rows = pg::exec(tx, sql::kBeginSteps, run.value(), generation.value(),
                               intent.step_no.value(), json);
    if (!rows.empty()) return rows[0][0].as<std::string>();
  } catch (const pqxx::unique_violation&) {
    pqxx::nontransaction tx(*conn);
    const Step existing =
        step_from_row(pg::exec(tx, sql::kStep, run.value(), intent.step_no.value())[0]);
    if (existing.tool == intent.tool && existing.call_id == intent.call_id &&
        existing.args == intent.args) {
      return existing.effect_key;  // the same intent again (e.g. a retry after a lost reply)
    }
    throw Conflict("step " + std::to_string(intent.step_no.value()) + " of run " + run.value() +
                       " is already recorded for another call (" + existing.call_id + ")",
                   {{"run_id", run.value()}, {"step_no", intent.step_no.value()}});
  }
  explain_refused_intents(run, generation, intents);
}

TurnWritten Store::append_turn(const RunId& run, Generation generation,
                               std::string_view assistant_turn,
                               const std::vector<StepIntent>& intents) {
  return append_turn_at(run, generation, assistant_turn, intents, std::nullopt);
}

TurnWritten Store::append_turn_at(const RunId& run, Generation generation,
                                  std::string_view assistant_turn,
                                  const std::vector<StepIntent>& intents,
                                  std::optional<std::int64_t> expected_seq) {
  check_entry_size(assistant_turn, options_.max_entry_bytes);
  if (expected_seq && *expected_seq < 1) {
    throw InvalidArgument("expected_seq must be at least 1", {{"field", "expected_seq"}});
  }
  const std::string json = intents_json(intents, options_.max_args_bytes);
  pqxx::result rows;
  try {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    rows = pg::exec(tx, sql::kAppendTurn, run.value(), generation.value(), highest_step(intents),
                    json, bytes_param(assistant_turn), SeqParam(expected_seq).get());
  } catch (const pqxx::unique_violation&) {
    throw Conflict(
        "a step of this turn is already recorded for run " + run.value() + "; nothing was written",
        {{"run_id", run.value()}});
  }
  if (rows[0]["seq"].is_null()) {
    if (expected_seq) {
      if (const auto repeated = explain_refused_at(run, generation, EntryKind::assistant,
                                                   assistant_turn, *expected_seq)) {
        return repeated_turn(run, repeated->seq, intents);
      }
    }
    explain_refused_intents(run, generation, intents);
  }
  TurnWritten out{rows[0]["seq"].as<std::int64_t>(), {}};
  for (const auto& key : nlohmann::json::parse(rows[0]["keys"].as<std::string>())) {
    out.effect_keys.push_back(key.get<std::string>());
  }
  return out;
}

void Store::complete_step(const RunId& run, Generation generation, StepNo step,
                          const StepOutcome& outcome) {
  check_outcome(outcome, options_.max_result_bytes);
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    if (!exec_completion(tx, sql::kCompleteStep, run, generation, step, outcome).empty()) return;
  }
  explain_refused_completion(run, generation, step, outcome);
}

void Store::complete_with_result(const RunId& run, Generation generation, StepNo step,
                                 const StepOutcome& outcome, std::string_view tool_result,
                                 const nlohmann::json& settlement) {
  check_outcome(outcome, options_.max_result_bytes);
  check_entry_size(tool_result, options_.max_entry_bytes);
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    if (!exec_completion(tx, sql::kCompleteWithResult, run, generation, step, outcome,
                         bytes_param(tool_result), pg::nullable(json_or_null(settlement)))
             .empty()) {
      return;
    }
  }
  explain_refused_completion(run, generation, step, outcome);
}

std::int64_t Store::append_tool_result(const RunId& run, Generation generation, StepNo step,
                                       std::string_view tool_result,
                                       const nlohmann::json& settlement) {
  check_entry_size(tool_result, options_.max_entry_bytes);
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows =
        pg::exec(tx, sql::kAppendToolResult, run.value(), generation.value(), step.value(),
                 bytes_param(tool_result), pg::nullable(json_or_null(settlement)));
    if (!rows.empty()) return rows[0][0].as<std::int64_t>();
  }
  still_owned(run, generation, "tool_result append");
  const Step existing = read_step(run, step);
  throw Conflict("step " + std::to_string(step.value()) + " of run " + run.value() +
                     (existing.state == StepState::intent ? " has no result yet"
                                                          : " already has its tool_result entry"),
                 {{"run_id", run.value()}, {"step_no", step.value()}});
}

std::optional<Entry> Store::last_entry(const RunId& run, EntryKind kind) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kLastEntryOfKind, run.value(), std::string(to_string(kind)));
  if (rows.empty()) return std::nullopt;
  const auto& row = rows[0];
  return Entry{row["seq"].as<std::int64_t>(),
               Generation(row["generation"].as<std::int64_t>()),
               kind,
               bytes_from(row["body"]),
               digest_from(row["sha256"]),
               row["created_at"].as<std::string>()};
}

std::int64_t Store::count_entries(const RunId& run, EntryKind kind) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  return pg::exec(tx, sql::kCountEntriesOfKind, run.value(), std::string(to_string(kind)))[0][0]
      .as<std::int64_t>();
}

TurnWritten Store::repeated_turn(const RunId& run, std::int64_t seq,
                                 const std::vector<StepIntent>& intents) {
  TurnWritten out{seq, {}};
  for (const auto& intent : intents) {
    std::optional<Step> recorded;
    try {
      recorded = read_step(run, intent.step_no);
    } catch (const NotFound&) {
    }
    if (!recorded || recorded->tool != intent.tool || recorded->call_id != intent.call_id ||
        recorded->args != intent.args) {
      throw Conflict("entry " + std::to_string(seq) + " of run " + run.value() +
                         " is this turn, but step " + std::to_string(intent.step_no.value()) +
                         " is not its intent",
                     {{"run_id", run.value()}, {"step_no", intent.step_no.value()}});
    }
    out.effect_keys.push_back(recorded->effect_key);
  }
  return out;
}

void Store::record_settlement(const RunId& run, Generation generation, StepNo step,
                              const nlohmann::json& settlement) {
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    if (!pg::exec(tx, sql::kRecordSettlement, run.value(), generation.value(), step.value(),
                  settlement.dump())
             .empty()) {
      return;
    }
  }
  still_owned(run, generation, "settlement record");
  read_step(run, step);  // NotFound when it has no intent
  throw Conflict(
      "step " + std::to_string(step.value()) + " of run " + run.value() + " is not in flight",
      {{"run_id", run.value()}, {"step_no", step.value()}});
}

ledger::Run Store::still_owned(const RunId& run, Generation generation, std::string_view action) {
  ledger::Run current = ledger_.get(run);
  if (current.status != ledger::RunStatus::running || current.generation != generation) {
    ledger_.throw_refused(run, generation, action);
  }
  return current;
}

Step Store::read_step(const RunId& run, StepNo step) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kStep, run.value(), step.value());
  if (rows.empty()) {
    throw NotFound(
        "step " + std::to_string(step.value()) + " of run " + run.value() + " has no intent",
        {{"run_id", run.value()}, {"step_no", step.value()}});
  }
  return step_from_row(rows[0]);
}

std::vector<Step> Store::steps(const RunId& run) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  std::vector<Step> out;
  for (const auto& row : pg::exec(tx, sql::kSteps, run.value())) out.push_back(step_from_row(row));
  return out;
}

paging::Page<TimelineStep> Store::step_timeline(const RunId& run, const paging::PageRequest& page) {
  const auto start = paging::start_parameters(kStepTimelineListing, page);
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows =
      pg::exec(tx, sql::kStepTimeline, run.value(), pg::nullable(start.id), page.limit + 1);
  return paging::page_of<TimelineStep>(
      rows, kStepTimelineListing, page.limit, timeline_step_from_row, [](const pqxx::row& row) {
        return paging::Position{std::nullopt, row["step_no"].as<std::string>()};
      });
}

StepNo Store::next_step_no(const RunId& run) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  return StepNo(pg::exec(tx, sql::kNextStepNo, run.value())[0][0].as<std::int64_t>());
}

void Store::explain_refused_intents(const RunId& run, Generation generation,
                                    const std::vector<StepIntent>& intents) {
  const ledger::Run current = still_owned(run, generation, "step intent");
  std::string limit;
  if (highest_step(intents) > current.budget.max_steps) {
    limit = "max_steps";
  } else {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    if (pg::exec(tx, sql::kWallSpent, run.value())[0][0].as<bool>()) limit = "wall_s";
  }
  if (limit.empty()) ledger_.throw_refused(run, generation, "step intent");  // claimed meanwhile
  const nlohmann::json details = {{"run_id", run.value()},
                                  {"error", "budget_exhausted"},
                                  {"limit", limit},
                                  {"max_steps", current.budget.max_steps},
                                  {"wall_s", current.budget.wall_s}};
  ledger_.finish(run, generation, ledger::RunStatus::failed, details);
  throw BudgetExhausted(
      "run " + run.value() + " has spent its " + limit + " budget; it is finished as failed",
      details);
}

void Store::explain_refused_completion(const RunId& run, Generation generation, StepNo step,
                                       const StepOutcome& outcome) {
  still_owned(run, generation, "step completion");
  const Step existing = read_step(run, step);
  const bool identical = existing.state == outcome.state &&
                         (outcome.state == StepState::done ? existing.result == outcome.result
                                                           : existing.error == outcome.error);
  if (identical) return;  // the same completion again
  throw Conflict(
      "step " + std::to_string(step.value()) + " of run " + run.value() + " is already " +
          std::string(to_string(existing.state)) + " with another outcome",
      {{"run_id", run.value()}, {"step_no", step.value()}, {"state", to_string(existing.state)}});
}

}  // namespace runledger::transcript
