#include "errors/errors.h"
#include "pg/pg.h"

namespace runledger::pg {

namespace {

std::vector<Setting> session_settings(const Pool::Options& o) {
  std::vector<Setting> all = {
      {"lock_timeout", duration_setting(o.lock_timeout)},
      {"idle_in_transaction_session_timeout", duration_setting(o.idle_in_transaction_timeout)},
      {"TimeZone", "UTC"},
  };
  all.insert(all.end(), o.settings.begin(), o.settings.end());
  return all;
}

constexpr Statement kPing{"pg_ping", "SELECT 1"};

}  // namespace

void Pool::ping() {
  auto conn = acquire();
  pqxx::nontransaction tx(*conn);
  exec(tx, kPing);
}

Pool::Pool(Options options)
    : options_(std::move(options)), url_(with_settings(options_.url, session_settings(options_))) {
  if (options_.size < 1) throw InvalidArgument("pool size must be at least 1");
}

Pool::Pool(std::string url, int size)
    : Pool([&] {
        Options o;
        o.url = std::move(url);
        o.size = size;
        return o;
      }()) {}

Pool::Lease Pool::acquire() {
  std::unique_lock lock(mu_);
  const bool ready = cv_.wait_for(lock, options_.acquire_timeout,
                                  [&] { return !idle_.empty() || open_ < options_.size; });
  if (!ready) {
    throw Unavailable("no database connection became free within " +
                      std::to_string(options_.acquire_timeout.count()) + " ms");
  }
  if (!idle_.empty()) {
    auto conn = std::move(idle_.back());
    idle_.pop_back();
    return Lease(this, std::move(conn));
  }
  ++open_;
  lock.unlock();
  try {
    return Lease(this, std::make_unique<pqxx::connection>(url_));
  } catch (const std::exception&) {
    {
      std::lock_guard again(mu_);
      --open_;
      cv_.notify_one();
    }
    rethrow_classified(Phase::connect);
  }
}

void Pool::give_back(std::unique_ptr<pqxx::connection> conn) {
  std::lock_guard lock(mu_);
  if (conn->is_open()) {
    idle_.push_back(std::move(conn));
  } else {
    --open_;
  }
  cv_.notify_one();
}

Pool::Lease::Lease(Lease&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)), conn_(std::move(other.conn_)) {}

Pool::Lease::~Lease() {
  if (pool_ != nullptr && conn_) pool_->give_back(std::move(conn_));
}

}  // namespace runledger::pg
