// The runledger command line: one executable, one function per subcommand. Private to cli/.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace runledger::cli {

using Args = std::vector<std::string>;

int up(const Args& args);       // foreground supervisor: embedded database + service
int service(const Args& args);  // the long-running service (retention sweeps, status)
int migrate(const Args& args);
int dispatch(const Args& args);
int runs(const Args& args);  // runs ls | show | cancel
int sweep(const Args& args);
int bot(const Args& args);              // the reference bot process
int run_coordinator(const Args& args);  // `coordinator`: the workflow executor process
int instances(const Args& args);        // instances create | ls | show | history | send-event
int ship_command(const Args& args);     // `ship`: start the ship pipeline for a chat message
int threads(const Args& args);          // threads show T: a thread's outbox
int policy(const Args& args);           // policy grant | revoke
int merge_actor(const Args& args);      // merges approved change requests (tests, demo)
int demo(const Args& args);             // `up`'s first-start demo (once per database)
// The demo's places under `up`'s root, and whether this database has shown it.
std::filesystem::path demo_repository(const std::filesystem::path& root);
std::filesystem::path demo_deploy_root(const std::filesystem::path& root);
bool demo_shown(const std::string& database_url);
// Creates the demo's bare repository (with one commit on main) unless it exists.
void prepare_demo_repository(const std::filesystem::path& root);
int db_url(const Args& args);

// DATABASE_URL, else the URL a running `runledger up` for this directory wrote; throws
// std::runtime_error saying how to get one when there is neither.
std::string database_url();

// Value of `--name value` in args, if present; throws InvalidArgument when the value is missing.
std::optional<std::string> flag(const Args& args, const std::string& name);

// The positive integer `value` of option `name`, or `fallback` when absent; InvalidArgument
// otherwise.
int positive(const std::optional<std::string>& value, const std::string& name, int fallback);
// Same, for `--name value` in args.
int positive(const Args& args, const std::string& name, int fallback);

}  // namespace runledger::cli
