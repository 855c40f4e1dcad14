// Reads and operator actions: not fenced by a generation, since they are not an owner's.
#include "errors/errors.h"
#include "ledger/ledger.h"
#include "ledger/run_row.h"
#include "ledger/statements.h"

namespace runledger::ledger {

void Ledger::cancel(const RunId& run, std::string_view by) {
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    if (!pg::exec(tx, sql::kCancel, run.value(), std::string(by)).empty()) return;
  }
  const Run current = get(run);
  if (current.status == RunStatus::cancelled) return;
  throw Conflict(
      "run " + run.value() + " already ended as " + std::string(to_string(current.status)),
      {{"run_id", run.value()}, {"status", to_string(current.status)}});
}

Run Ledger::get(const RunId& run) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kGetRun, run.value());
  if (rows.empty())
    throw NotFound("run " + run.value() + " does not exist", {{"run_id", run.value()}});
  return run_from_row(rows[0]);
}

std::vector<Run> Ledger::list(const RunFilter& filter) {
  if (filter.limit < 1 || filter.limit > 1000) {
    throw InvalidArgument("limit must be between 1 and 1000", {{"field", "limit"}});
  }
  std::optional<std::string> status, parent_run;
  if (filter.status) status = std::string(to_string(*filter.status));
  if (filter.parent_run) parent_run = filter.parent_run->value();
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  std::vector<Run> out;
  for (const auto& row :
       pg::exec(tx, sql::kListRuns, pg::nullable(status), pg::nullable(filter.thread_key),
                pg::nullable(parent_run), pg::nullable(filter.parent_instance), filter.limit)) {
    out.push_back(run_from_row(row));
  }
  return out;
}

std::int64_t Ledger::sweep_retention() {
  // Small batches keep each statement's locks short while bots keep working.
  constexpr int kBatch = 500;
  std::int64_t deleted = 0;
  auto conn = pool_.acquire();
  for (;;) {
    pqxx::nontransaction tx(*conn);
    const auto n =
        pg::exec(tx, sql::kSweepBatch, options_.retention.count(), kBatch).affected_rows();
    deleted += static_cast<std::int64_t>(n);
    if (n < kBatch) return deleted;
  }
}

}  // namespace runledger::ledger
