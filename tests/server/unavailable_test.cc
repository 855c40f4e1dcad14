// 503 is the server's one answer for "not now": the database gone, the pool exhausted, the
// budget of large bodies spent. Each is retryable, carries Retry-After, and passes.
#include <catch2/catch.hpp>

#include <thread>

#include "tests/server/server_fixture.h"

using namespace runledger;
using namespace std::chrono_literals;
using runledger::testing::HttpAnswer;
using runledger::testing::HttpClient;
using runledger::testing::ServerFixture;

namespace {

// Shuts the test's database to new sessions and ends its open ones, as a database restart or a
// network cut does to the server; opens it again when dropped.
class DatabaseCut {
 public:
  explicit DatabaseCut(const testing::TestDatabase& db)
      : name_(db.name()), admin_url_(testing::url_for_database(db.url(), "postgres")) {
    pqxx::connection admin(admin_url_);
    pqxx::nontransaction tx(admin);
    tx.exec("ALTER DATABASE " + tx.quote_name(name_) + " ALLOW_CONNECTIONS false");
    tx.exec_params(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> "
        "pg_backend_pid()",
        name_);
    // pg_terminate_backend only signals: wait until the sessions are gone.
    for (int i = 0; i < 500; ++i) {
      if (tx.exec_params("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name_)[0][0]
              .as<int>() == 0) {
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
    FAIL("the database's sessions did not end");
  }
  ~DatabaseCut() {
    pqxx::connection admin(admin_url_);
    pqxx::nontransaction tx(admin);
    tx.exec("ALTER DATABASE " + tx.quote_name(name_) + " ALLOW_CONNECTIONS true");
  }

 private:
  std::string name_;
  std::string admin_url_;
};

void check_unavailable(const HttpAnswer& answer) {
  CHECK(answer.status == 503);
  CHECK(answer.code() == "unavailable");
  CHECK(answer.json()["retryable"] == true);
  CHECK(answer.headers.count("Retry-After") == 1);
  CHECK(answer.json()["request_id"] == answer.headers.at("X-Request-Id"));
}

}  // namespace

TEST_CASE("with the database unreachable, /readyz and the bot routes are 503, then serve again") {
  ServerFixture f;
  auto c = f.client();
  HttpClient anonymous(f.http->port());
  REQUIRE(anonymous.get("/readyz").status == 200);
  const std::string incarnation = random_uuid();
  const nlohmann::json claim{{"slot", "s"}, {"incarnation", incarnation}};
  REQUIRE(c.post("/v1/runs/claim", claim).status == 200);
  {
    DatabaseCut cut(f.db);
    CHECK(anonymous.get("/healthz").status == 200);  // alive, only not ready
    const auto ready = anonymous.get("/readyz");
    check_unavailable(ready);
    CHECK(ready.json()["message"] == "the database is not reachable");  // no host, port or name
    CHECK(ready.body.find(f.db.name()) == std::string::npos);
    check_unavailable(c.post("/v1/runs/claim", claim));
    check_unavailable(c.get("/v1/runs?status=queued"));
  }
  // The pool replaces the connections it found broken; nothing is restarted.
  const auto until = std::chrono::steady_clock::now() + 20s;
  unsigned status = 0;
  while ((status = anonymous.get("/readyz").status) != 200 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);
  }
  CHECK(status == 200);
  CHECK(c.post("/v1/runs/claim", claim).status == 200);
}

TEST_CASE("a request finding the pool exhausted waits its acquire timeout, then is 503") {
  ServerFixture f(ServerFixture::fast_options(), 300ms);
  auto c = f.client();
  REQUIRE(c.get("/v1/runs?status=queued").status == 200);
  {
    std::vector<pg::Pool::Lease> held;
    for (int i = 0; i < f.pool.size(); ++i) held.push_back(f.pool.acquire());
    const auto t0 = std::chrono::steady_clock::now();
    check_unavailable(c.get("/v1/runs?status=queued"));
    CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);
  }
  CHECK(c.get("/v1/runs?status=queued").status == 200);
}

TEST_CASE(
    "past the budget of large bodies in flight a request is 503 at once, and the budget "
    "comes back") {
  server::Options o = ServerFixture::fast_options();
  o.large_bodies_in_flight = 3u << 19;  // 1.5 MiB: room for one body of 1.2 MiB, not of 2 MiB
  ServerFixture f(o);
  auto c = f.client();
  const std::string target = "/v1/runs/" + random_uuid() + "/transcript?generation=1&kind=user";
  // The whole body is read (and dropped) first, so a client still sending sees the answer.
  check_unavailable(
      c.request("POST", target, std::string(2u << 20, 'x'), "application/octet-stream"));
  for (int i = 0; i < 2; ++i) {  // each gives its share back
    HttpClient fresh(f.http->port(), f.bot_token);
    const auto answer =
        fresh.request("POST", target, std::string(1258291, 'x'), "application/octet-stream");
    CHECK(answer.status == 404);  // past the budget check: the run is unknown
  }
}
