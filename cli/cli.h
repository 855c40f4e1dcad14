// The runledger command line: one executable, one Command (cli/arguments/arguments.h) per command,
// each declared next to the function that runs it. Private to cli/.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cli/arguments/arguments.h"

namespace runledger::cluster {
class EmbeddedCluster;
}

namespace runledger::cli {

// Every command of the executable, in the order its usage lists them.
Command program();

Command up_command();       // foreground supervisor: embedded database + service
Command service_command();  // the long-running service (retention sweeps, status)
Command migrate_command();
Command dispatch_command();
Command runs_command();  // runs ls | show | cancel
Command sweep_command();
Command db_url_command();
Command bot_command();          // the reference bot process
Command coordinator_command();  // the workflow executor process
Command instances_command();    // instances create | ls | show | history | send-event | ...
Command ship_command();         // start the ship pipeline for a chat message
Command threads_command();      // threads show T: a thread's outbox
Command policy_command();       // policy grant | revoke
Command merge_actor_command();  // merges approved change requests (tests, demo)
Command token_command();        // token create | list | revoke: API tokens
Command demo_command();         // `up`'s first-start demo (once per database)
Command serve_command();        // the HTTP/JSON API server

// The demo's places under `up`'s root, and whether this database has shown it.
std::filesystem::path demo_repository(const std::filesystem::path& root);
std::filesystem::path demo_deploy_root(const std::filesystem::path& root);
bool demo_shown(const std::string& database_url);
// Creates the demo's bare repository (with one commit on main) unless it exists.
void prepare_demo_repository(const std::filesystem::path& root);

// DATABASE_URL, else the URL a running `runledger up` wrote into its root: `root` when given
// (`up --root DIR`), else this directory's default root. Throws InvalidArgument saying how to get
// one when there is neither.
std::string database_url(const std::optional<std::filesystem::path>& root = std::nullopt);

// `--root` as given, else the embedded cluster's default root for the current directory.
std::filesystem::path command_root(const std::optional<std::string>& root_flag);
// Writes `text` and a newline to `path`, readable by its owner only.
void write_private_file(const std::filesystem::path& path, const std::string& text);

// The database of `up` and `serve`: DATABASE_URL when set, else the embedded cluster under
// `root`, started here (one owner per root: cluster/cluster.h) and announced in
// <root>/database_url until this is destroyed, which stops it.
class AttachedDatabase {
 public:
  explicit AttachedDatabase(const std::filesystem::path& root);
  ~AttachedDatabase();
  AttachedDatabase(const AttachedDatabase&) = delete;
  AttachedDatabase& operator=(const AttachedDatabase&) = delete;
  const std::string& url() const { return url_; }
  bool embedded() const { return cluster_ != nullptr; }

 private:
  std::filesystem::path root_;
  std::unique_ptr<cluster::EmbeddedCluster> cluster_;
  std::string url_;
};

}  // namespace runledger::cli
