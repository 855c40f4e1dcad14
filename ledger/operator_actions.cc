// Reads and operator actions: not fenced by a generation, since they are not an owner's.
#include <algorithm>

#include "errors/errors.h"
#include "ledger/ledger.h"
#include "ledger/run_row.h"
#include "ledger/statements.h"

namespace runledger::ledger {
namespace {

// One listing per key: a cursor of one is refused by the others.
constexpr paging::Listing kRunsWithStatusListing{"runs_with_status", true, is_uuid};
constexpr paging::Listing kRunsInThreadListing{"runs_in_thread", true, is_uuid};
constexpr paging::Listing kRunsOfRequesterListing{"runs_of_requester", true, is_uuid};

}  // namespace

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

std::vector<std::pair<RunId, RunStatus>> Ledger::statuses(const std::vector<RunId>& runs) {
  std::vector<std::pair<RunId, RunStatus>> out;
  if (runs.empty()) return out;
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto ids = pg::array_literal(runs, [](const RunId& r) { return r.value(); });
  for (const auto& row : pg::exec(tx, sql::kStatuses, ids)) {
    out.emplace_back(RunId(row[0].as<std::string>()), parse_run_status(row[1].as<std::string>()));
  }
  return out;
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

paging::Page<Run> Ledger::runs_page(const pg::Statement& statement, const paging::Listing& listing,
                                    const std::string& key, const paging::PageRequest& page) {
  const auto start = paging::start_parameters(listing, page);
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, statement, key, pg::nullable(start.at_us), pg::nullable(start.id),
                             page.limit + 1);
  return paging::page_of<Run>(rows, listing, page.limit, run_from_row, [](const pqxx::row& row) {
    return paging::Position{row["position_at"].as<std::int64_t>(), row["run_id"].as<std::string>()};
  });
}

paging::Page<Run> Ledger::runs_with_status(RunStatus status, const paging::PageRequest& page) {
  return runs_page(sql::kRunsWithStatus, kRunsWithStatusListing, std::string(to_string(status)),
                   page);
}

paging::Page<Run> Ledger::runs_in_thread(std::string_view thread_key,
                                         const paging::PageRequest& page) {
  check_key(thread_key, "thread_key");
  return runs_page(sql::kRunsInThread, kRunsInThreadListing, std::string(thread_key), page);
}

paging::Page<Run> Ledger::runs_of_requester(std::string_view requester,
                                            const paging::PageRequest& page) {
  check_key(requester, "requester");
  return runs_page(sql::kRunsOfRequester, kRunsOfRequesterListing, std::string(requester), page);
}

std::vector<StatusCount> Ledger::count_by_status() {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  std::vector<StatusCount> out;
  for (const auto& row : pg::exec(tx, sql::kCountByStatus)) {
    out.push_back({parse_run_status(row[0].as<std::string>()), row[1].as<std::int64_t>()});
  }
  std::sort(out.begin(), out.end(),
            [](const StatusCount& a, const StatusCount& b) { return a.status < b.status; });
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
