// The chat thread outbox and the requester policy: rows, each write idempotent.
#include "errors/errors.h"
#include "ids/ids.h"
#include "ship/ship.h"
#include "ship/statements.h"

namespace runledger::ship {

ThreadOutbox::ThreadOutbox(pg::Pool& pool) : pool_(pool) {}

bool ThreadOutbox::post(const std::string& thread_key, const std::string& dedupe_key,
                        const std::string& body) {
  check_key(thread_key, "thread");
  check_key(dedupe_key, "dedupe key");
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  return !pg::exec(tx, sql::kPost, thread_key, dedupe_key, body).empty();
}

std::vector<ThreadMessage> ThreadOutbox::messages(const std::string& thread_key) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  std::vector<ThreadMessage> out;
  for (const auto& row : pg::exec(tx, sql::kMessages, thread_key)) {
    out.push_back({row[0].as<std::int64_t>(), row[1].as<std::string>(), row[2].as<std::string>(),
                   row[3].as<std::string>(), row[4].as<std::string>()});
  }
  return out;
}

Policy::Policy(pg::Pool& pool) : pool_(pool) {}

bool Policy::allows(const std::string& requester, const std::string& capability) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  return !pg::exec(tx, sql::kAllows, requester, capability).empty();
}

void Policy::grant(const std::string& requester, const std::string& capability) {
  check_key(requester, "requester");
  check_key(capability, "capability");
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  pg::exec(tx, sql::kGrant, requester, capability);
}

void Policy::revoke(const std::string& requester, const std::string& capability) {
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  pg::exec(tx, sql::kRevoke, requester, capability);
}

}  // namespace runledger::ship
