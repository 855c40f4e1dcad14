#include "migrations/migrations.h"

#include <spdlog/spdlog.h>

#include <charconv>
#include <map>
#include <stdexcept>
#include <string_view>

#include "digest/digest.h"
#include "errors/errors.h"
#include "ids/ids.h"
#include "migrations/statements.h"
#include "pg/pg.h"

namespace runledger::migrations {

struct EmbeddedFile {
  std::string_view name;
  std::string_view bytes;
};
const std::vector<EmbeddedFile>& embedded_files();

namespace {

int parse_version(std::string_view name) {
  int version = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), version);
  if (ec != std::errc() || end != name.data() + 4 || name.size() < 6 || name[4] != '_') {
    throw std::logic_error("migration file name must be NNNN_name.sql: " + std::string(name));
  }
  return version;
}

std::vector<Migration> load() {
  std::vector<Migration> out;
  for (const auto& file : embedded_files()) {
    Migration m{parse_version(file.name), std::string(file.name), std::string(file.bytes),
                digest::hex(digest::sha256(file.bytes))};
    if (m.version != static_cast<int>(out.size()) + 1) {
      throw std::logic_error("migrations must be numbered 0001, 0002, ... without gaps; found " +
                             m.name);
    }
    out.push_back(std::move(m));
  }
  return out;
}

struct Recorded {
  std::string name;
  std::string sha256;
};

std::map<int, Recorded> read_record(pqxx::connection& conn) {
  pqxx::nontransaction tx(conn);
  std::map<int, Recorded> out;
  for (const auto& row : pg::exec(tx, sql::kApplied)) {
    out[row[0].as<int>()] = Recorded{row[1].as<std::string>(), row[2].as<std::string>()};
  }
  return out;
}

void check_record(const std::map<int, Recorded>& recorded) {
  const auto& known = all();
  for (const auto& [version, rec] : recorded) {
    if (version < 1 || version > static_cast<int>(known.size())) {
      throw Conflict("the database has migration " + std::to_string(version) + " (" + rec.name +
                         ") which this build does not know: the database is newer than the code",
                     {{"version", version}});
    }
    const Migration& m = known[static_cast<std::size_t>(version - 1)];
    if (m.sha256 != rec.sha256) {
      throw Conflict("migration " + m.name + " was changed after it was applied (recorded sha256 " +
                         rec.sha256 + ", file sha256 " + m.sha256 +
                         "); add a new migration instead of editing an applied one",
                     {{"version", version}});
    }
  }
}

}  // namespace

const std::vector<Migration>& all() {
  static const std::vector<Migration> migrations = load();
  return migrations;
}

std::vector<Applied> apply(const std::string& url) {
  pqxx::connection conn(url);
  {
    pqxx::nontransaction tx(conn);
    pg::exec(tx, sql::kTakeLock, kLock);
  }
  // The lock is released when `conn` closes, on every path out of this function.
  std::vector<Applied> done;
  {
    pqxx::nontransaction tx(conn);
    pg::exec(tx, sql::kCreateRecord);
  }
  const auto recorded = read_record(conn);
  check_record(recorded);
  for (const auto& m : all()) {
    if (recorded.contains(m.version)) continue;
    pqxx::work tx(conn);
    tx.exec(m.sql);  // the file itself: trusted code shipped in the binary, not a value
    pg::exec(tx, sql::kRecord, m.version, m.name, m.sha256);
    tx.commit();
    spdlog::info("applied migration {}", m.name);
    done.push_back({m.version, m.name});
  }
  return done;
}

std::vector<Applied> applied(const std::string& url) {
  pqxx::connection conn(url);
  {
    pqxx::nontransaction tx(conn);
    if (!pg::exec(tx, sql::kRecordExists)[0][0].as<bool>()) return {};
  }
  std::vector<Applied> out;
  for (const auto& [version, rec] : read_record(conn)) out.push_back({version, rec.name});
  return out;
}

bool mark_once(pg::Pool& pool, std::string_view name) {
  check_key(name, "marker name");
  auto conn = pool.acquire();
  pqxx::nontransaction tx(*conn);
  return !pg::exec(tx, sql::kMarkOnce, std::string(name)).empty();
}

bool marked(pg::Pool& pool, std::string_view name) {
  check_key(name, "marker name");
  auto conn = pool.acquire();
  pqxx::nontransaction tx(*conn);
  return !pg::exec(tx, sql::kMarked, std::string(name)).empty();
}

}  // namespace runledger::migrations
