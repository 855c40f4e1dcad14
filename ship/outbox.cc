// The chat thread outbox and the requester policy: rows, each write idempotent.
#include "errors/errors.h"
#include "ids/ids.h"
#include "ship/ship.h"
#include "ship/statements.h"

namespace runledger::ship {
namespace {

constexpr paging::Listing kMessagesListing{"thread_messages", true, paging::is_integer_id};

}  // namespace

ThreadOutbox::ThreadOutbox(pg::Pool& pool) : pool_(pool) {}

bool ThreadOutbox::post(const std::string& thread_key, const std::string& dedupe_key,
                        const std::string& body) {
  check_key(thread_key, "thread");
  check_key(dedupe_key, "dedupe key");
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  return !pg::exec(tx, sql::kPost, thread_key, dedupe_key, body).empty();
}

paging::Page<ThreadMessage> ThreadOutbox::messages(const std::string& thread_key,
                                                   const paging::PageRequest& page) {
  const auto start = paging::start_parameters(kMessagesListing, page);
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kMessagesPage, thread_key, pg::nullable(start.at_us),
                             pg::nullable(start.id), page.limit + 1);
  return paging::page_of<ThreadMessage>(
      rows, kMessagesListing, page.limit,
      [](const pqxx::row& row) {
        return ThreadMessage{row[0].as<std::int64_t>(), row[1].as<std::string>(),
                             row[2].as<std::string>(), row[3].as<std::string>(),
                             row[4].as<std::string>()};
      },
      [](const pqxx::row& row) {
        return paging::Position{row["position_at"].as<std::int64_t>(), row["id"].as<std::string>()};
      });
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
