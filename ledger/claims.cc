// Claims: the only writes that bump a run's generation (besides an operator's cancel).
#include "errors/errors.h"
#include "failpoint/failpoint.h"
#include "ledger/ledger.h"
#include "ledger/run_row.h"
#include "ledger/statements.h"

namespace runledger::ledger {
namespace {

std::vector<Claim> claims_from(const pqxx::result& rows) {
  std::vector<Claim> out;
  out.reserve(rows.size());
  for (const auto& row : rows) out.push_back({run_from_row(row), row["taken_over"].as<bool>()});
  return out;
}

// Claims commit in their own transaction so that a test can hold one between its row update and
// its commit (failpoint "ledger.claim.before_commit") and watch fenced writes wait for it.
template <class... Args>
pqxx::result claim_in_transaction(pg::Pool& pool, const pg::Statement& s, Args&&... args) {
  auto conn = pool.acquire();
  pg::Work tx(*conn);
  auto rows = pg::exec(tx, s, std::forward<Args>(args)...);
  failpoint::hit("ledger.claim.before_commit");
  tx.commit();
  return rows;
}

}  // namespace

std::vector<Claim> Ledger::claim_next(const Owner& owner, int max) {
  if (max < 1) return {};
  return claims_from(claim_in_transaction(pool_, sql::kClaimNext, options_.lease_ttl.count(),
                                          owner.slot.value(), owner.incarnation.value(), max));
}

std::vector<Claim> Ledger::claim_expired(const Owner& owner, int max) {
  if (max < 1) return {};
  return claims_from(claim_in_transaction(pool_, sql::kClaimExpired, options_.lease_ttl.count(),
                                          owner.slot.value(), owner.incarnation.value(), max));
}

Claim Ledger::claim(const Owner& owner, const RunId& run) {
  const auto rows =
      claim_in_transaction(pool_, sql::kClaimOne, options_.lease_ttl.count(), owner.slot.value(),
                           owner.incarnation.value(), run.value());
  if (!rows.empty()) return claims_from(rows).front();
  const Run current = get(run);  // NotFound when unknown
  if (is_terminal(current.status)) {
    throw Conflict(
        "run " + run.value() + " has ended (" + std::string(to_string(current.status)) + ")",
        {{"run_id", run.value()}, {"status", to_string(current.status)}});
  }
  throw Conflict("run " + run.value() + " is leased by " +
                     (current.owner ? current.owner->slot.value() : std::string("another owner")) +
                     " until " + current.lease_expires_at.value_or("?"),
                 {{"run_id", run.value()},
                  {"generation", current.generation.value()},
                  {"lease_expires_at", current.lease_expires_at.value_or("")}});
}

std::vector<Claim> Ledger::take_over_slot(const Owner& owner, int max) {
  if (max < 1) throw InvalidArgument("max must be at least 1", {{"field", "max"}});
  return claims_from(claim_in_transaction(pool_, sql::kTakeOverSlot, options_.lease_ttl.count(),
                                          owner.slot.value(), owner.incarnation.value(), max));
}

}  // namespace runledger::ledger
