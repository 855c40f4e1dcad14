// The server the benches run against: DATABASE_URL, or a throwaway durable embedded cluster;
// and the connection for their own setup statements.
#include <stdlib.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cstdlib>
#include <system_error>

#include <spdlog/spdlog.h>

#include "bench/bench_support.h"

namespace runledger::bench {
namespace {

std::string filesystem_note(const std::filesystem::path& path) {
  struct statfs fs {};
  constexpr long kTmpfsMagic = 0x01021994;
  if (statfs(path.c_str(), &fs) == 0 && fs.f_type == kTmpfsMagic) {
    return " (WARNING: on tmpfs, fsync costs nothing)";
  }
  return "";
}

// Root in a fresh directory under /tmp: a throwaway cluster never reuses another's files.
void start_embedded(Server& server, std::string_view database) {
  char root[] = "/tmp/runledger-bench-XXXXXX";
  if (mkdtemp(root) == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp");
  cluster::Options options;
  options.root = root;
  options.durable = true;
  options.remove_on_stop = true;
  options.database = std::string(database);
  spdlog::info("starting an embedded cluster in {}", root);
  server.cluster.emplace(options);
  server.cluster->start();
  server.url = server.cluster->url();
  server.description = std::string("embedded cluster in ") + root + filesystem_note(root);
}

}  // namespace

void open_server(Server& server, std::string_view database) {
  if (const char* url = std::getenv("DATABASE_URL"); url != nullptr && *url != '\0') {
    server.url = url;
    server.description = "DATABASE_URL";
  } else {
    start_embedded(server, database);
  }
}

ScratchDatabase::ScratchDatabase(std::string url) : url_(std::move(url)), conn_(url_) {}

pqxx::result ScratchDatabase::exec(const std::string& query) {
  pqxx::nontransaction tx(conn_);
  return tx.exec(query);
}

std::string ScratchDatabase::value(const std::string& query) {
  return exec(query)[0][0].as<std::string>();
}

void ScratchDatabase::create_database(std::string_view name) {
  pqxx::nontransaction tx(conn_);
  if (tx.exec_params("SELECT 1 FROM pg_database WHERE datname = $1", std::string(name)).empty()) {
    tx.exec0("CREATE DATABASE " + conn_.quote_name(std::string(name)));
  }
}

void ScratchDatabase::checkpoint() {
  try {
    exec("CHECKPOINT");
  } catch (const pqxx::insufficient_privilege&) {
    if (!warned_checkpoint_) spdlog::warn("cannot CHECKPOINT (no privilege): skipping it");
    warned_checkpoint_ = true;
  }
}

std::vector<std::string> ScratchDatabase::server_lines(const Server& server) {
  return {value("SELECT version()"),
          "server: " + server.description + "; fsync=" + value("SHOW fsync") +
              ", synchronous_commit=" + value("SHOW synchronous_commit") +
              ", full_page_writes=" + value("SHOW full_page_writes")};
}

}  // namespace runledger::bench
