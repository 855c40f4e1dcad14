// The database `up` and `serve` run on: DATABASE_URL, else the embedded cluster under the root.
#include <spdlog/spdlog.h>

#include <fstream>

#include "cli/cli.h"
#include "cluster/cluster.h"

namespace runledger::cli {

void write_private_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text << "\n";
  out.close();
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

std::filesystem::path command_root(const std::optional<std::string>& root_flag) {
  return root_flag ? std::filesystem::path(*root_flag)
                   : cluster::default_root(std::filesystem::current_path());
}

AttachedDatabase::AttachedDatabase(const std::filesystem::path& root) : root_(root) {
  if (const char* external = std::getenv("DATABASE_URL"); external && *external) {
    url_ = external;
    spdlog::info("using DATABASE_URL; no embedded cluster");
    return;
  }
  cluster::Options options;
  options.root = root;
  cluster_ = std::make_unique<cluster::EmbeddedCluster>(options);
  cluster_->start();
  url_ = cluster_->url();
  // Other commands given the same root attach to it through this file.
  write_private_file(root / "database_url", url_);
  spdlog::info("embedded PostgreSQL on 127.0.0.1:{}, data in {}", cluster_->port(), root.string());
}

AttachedDatabase::~AttachedDatabase() {
  if (!cluster_) return;
  std::error_code ignored;
  std::filesystem::remove(root_ / "database_url", ignored);
  cluster_->stop();
}

}  // namespace runledger::cli
