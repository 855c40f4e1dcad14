// Writes made by a run's owner, each fenced by the generation it names.
#include "errors/errors.h"
#include "failpoint/failpoint.h"
#include "ledger/ledger.h"
#include "ledger/run_row.h"
#include "ledger/statements.h"

namespace runledger::ledger {

void Ledger::throw_refused(const RunId& run, Generation generation, std::string_view action) {
  const Run current = get(run);  // NotFound when unknown
  throw FencedError(std::string(action) + " of run " + run.value() + " as generation " +
                        std::to_string(generation.value()) + " refused: the run is " +
                        std::string(to_string(current.status)) + " at generation " +
                        std::to_string(current.generation.value()),
                    {{"run_id", run.value()},
                     {"generation", generation.value()},
                     {"current_generation", current.generation.value()},
                     {"status", to_string(current.status)}});
}

std::vector<RunId> Ledger::heartbeat(const Owner& owner,
                                     const std::vector<std::pair<RunId, Generation>>& runs) {
  return extend_leases(owner, runs).lost;
}

Ledger::Leases Ledger::extend_leases(const Owner& owner,
                                     const std::vector<std::pair<RunId, Generation>>& runs) {
  if (runs.empty()) return {};
  const auto ids = pg::array_literal(runs, [](const auto& r) { return r.first.value(); });
  const auto generations =
      pg::array_literal(runs, [](const auto& r) { return std::to_string(r.second.value()); });
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto kept = pg::exec(tx, sql::kHeartbeat, options_.lease_ttl.count(), ids, generations,
                             owner.slot.value(), owner.incarnation.value());
  Leases leases;
  std::vector<std::string> kept_ids;
  for (const auto& row : kept) {
    kept_ids.push_back(row[0].as<std::string>());
    leases.lease_expires_at = row[1].as<std::string>();  // one statement: one now(), one end
  }
  for (const auto& [run, generation] : runs) {
    if (std::find(kept_ids.begin(), kept_ids.end(), run.value()) == kept_ids.end()) {
      leases.lost.push_back(run);
    }
  }
  return leases;
}

void Ledger::finish(const RunId& run, Generation generation, RunStatus status,
                    const nlohmann::json& result) {
  if (!is_terminal(status)) {
    throw InvalidArgument("finish needs a terminal status, not " + std::string(to_string(status)));
  }
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    if (!pg::exec(tx, sql::kFinish, run.value(), generation.value(), std::string(to_string(status)),
                  result.dump())
             .empty()) {
      return;
    }
  }
  const Run current = get(run);
  if (current.generation == generation && is_terminal(current.status)) {
    if (current.status == status && current.result == result) return;  // the same finish again
    throw Conflict("run " + run.value() + " already ended as " +
                       std::string(to_string(current.status)) + " with another result",
                   {{"run_id", run.value()}, {"status", to_string(current.status)}});
  }
  throw_refused(run, generation, "finish");
}

void Ledger::release(const RunId& run, Generation generation) {
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    if (!pg::exec(tx, sql::kRelease, run.value(), generation.value()).empty()) return;
  }
  throw_refused(run, generation, "release");
}

void Ledger::write_fenced(const RunId& run, Generation generation,
                          const std::function<void(pqxx::work&)>& body) {
  {
    auto conn = pool_.acquire();
    pg::Work tx(*conn);
    if (!pg::exec(tx, sql::kFenceShare, run.value(), generation.value()).empty()) {
      body(tx);
      failpoint::hit("ledger.write_fenced.before_commit");
      tx.commit();
      return;
    }
  }
  throw_refused(run, generation, "write");
}

}  // namespace runledger::ledger
