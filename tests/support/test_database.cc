#include "tests/support/test_database.h"

#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "cluster/cluster.h"
#include "ids/ids.h"
#include "migrations/migrations.h"
#include "migrations/test_clock/test_clock.h"

namespace runledger::testing {
namespace {

// Only for a test binary run by hand, outside the test-run wrapper.
std::string process_cluster_url() {
  static std::once_flag once;
  static std::unique_ptr<cluster::EmbeddedCluster> cluster;
  std::call_once(once, [] {
    cluster::Options options;
    options.root = std::filesystem::temp_directory_path() / ("runledger-test-" + random_uuid());
    options.durable = false;
    options.remove_on_stop = true;
    options.database = "postgres";
    cluster = std::make_unique<cluster::EmbeddedCluster>(options);
    cluster->start();
    prepare_template(cluster->url("postgres"));
    // Stopped at exit by the static destructor.
  });
  return cluster->url("postgres");
}

std::string admin_url() {
  if (const char* url = std::getenv("RUNLEDGER_TEST_DATABASE_URL"); url && *url) return url;
  return process_cluster_url();
}

}  // namespace

std::string url_for_database(const std::string& admin_url, const std::string& database) {
  // postgresql://user:pw@host:port/db[?query]
  const auto scheme = admin_url.find("://");
  const auto slash = admin_url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (scheme == std::string::npos || slash == std::string::npos) {
    throw std::invalid_argument("test database URL must be postgresql://host:port/db");
  }
  const auto query = admin_url.find('?', slash);
  return admin_url.substr(0, slash + 1) + database +
         (query == std::string::npos ? "" : admin_url.substr(query));
}

void prepare_template(const std::string& admin_url) {
  {
    pqxx::connection conn(admin_url);
    pqxx::nontransaction tx(conn);
    tx.exec("DROP DATABASE IF EXISTS " + tx.quote_name(kTemplateDatabase));
    tx.exec("CREATE DATABASE " + tx.quote_name(kTemplateDatabase));
  }
  const std::string url = url_for_database(admin_url, kTemplateDatabase);
  migrations::apply(url);
  pqxx::connection conn(url);
  migrations::install_test_clock(conn);  // once here: every clone has it, its skew at 0
}

TestDatabase::TestDatabase()
    : admin_url_(admin_url()),
      name_("t_" + random_uuid().substr(0, 8) + random_uuid().substr(0, 8)) {
  {
    pqxx::connection conn(admin_url_);
    pqxx::nontransaction tx(conn);
    // FILE_COPY: far faster than WAL_LOG for a small template.
    tx.exec("CREATE DATABASE " + tx.quote_name(name_) + " TEMPLATE " +
            tx.quote_name(kTemplateDatabase) + " STRATEGY FILE_COPY");
  }
  url_ = url_for_database(admin_url_, name_);
}

TestDatabase::~TestDatabase() {
  try {
    pqxx::connection conn(admin_url_);
    pqxx::nontransaction tx(conn);
    tx.exec("DROP DATABASE IF EXISTS " + tx.quote_name(name_) + " WITH (FORCE)");
  } catch (const std::exception&) {
    // The cluster is thrown away after the run anyway.
  }
}

pg::Pool::Options TestDatabase::pool_options(int size) const {
  pg::Pool::Options o;
  o.url = url_;
  o.size = size;
  o.lock_timeout = std::chrono::milliseconds(10'000);
  return o;
}

void TestDatabase::advance_clock(std::chrono::milliseconds by) const {
  pqxx::connection conn(url_);
  pqxx::nontransaction tx(conn);
  tx.exec_params("SELECT runledger_move_clock($1::bigint)", static_cast<long long>(by.count()));
}

}  // namespace runledger::testing
