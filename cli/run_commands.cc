// Commands that read or change the ledger from the shell.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>

#include "cli/cli.h"
#include "errors/errors.h"
#include "ledger/ledger.h"
#include "migrations/migrations.h"

namespace runledger::cli {
namespace {

int int_flag(const Args& args, const std::string& name, int fallback) {
  const auto value = flag(args, name);
  if (!value) return fallback;
  try {
    std::size_t used = 0;
    const int n = std::stoi(*value, &used);
    if (used == value->size()) return n;
  } catch (const std::exception&) {
  }
  throw InvalidArgument(name + " must be an integer");
}

std::string required(const Args& args, const std::string& name) {
  auto value = flag(args, name);
  if (!value) throw InvalidArgument(name + " is required");
  return *value;
}

struct Session {
  pg::Pool pool{database_url(), 1};
  ledger::Ledger ledger{pool};
};

void print(const nlohmann::json& j) {
  std::cout << j.dump(2) << "\n";
}

}  // namespace

int migrate(const Args&) {
  const auto done = migrations::apply(database_url());
  for (const auto& m : done) std::cout << "applied " << m.name << "\n";
  if (done.empty()) std::cout << "up to date\n";
  return 0;
}

int db_url(const Args&) {
  std::cout << database_url() << "\n";
  return 0;
}

int dispatch(const Args& args) {
  ledger::DispatchRequest r;
  r.dispatch_key = required(args, "--key");
  r.thread_key = required(args, "--thread");
  r.requester = required(args, "--requester");
  if (auto profile = flag(args, "--profile")) {
    try {
      r.profile = nlohmann::json::parse(*profile);
    } catch (const nlohmann::json::parse_error&) {
      throw InvalidArgument("--profile is not valid JSON");
    }
  }
  if (flag(args, "--wall-s") || flag(args, "--max-steps")) {
    const ledger::Budget fallback = ledger::Options{}.default_budget;
    r.budget = ledger::Budget{int_flag(args, "--wall-s", fallback.wall_s),
                              int_flag(args, "--max-steps", fallback.max_steps)};
  }
  if (auto parent = flag(args, "--parent-run")) r.parent_run = RunId::parse(*parent);
  r.parent_instance = flag(args, "--parent-instance");
  Session s;
  const auto d = s.ledger.dispatch(r);
  print({{"created", d.created}, {"run", ledger::to_json(d.run)}});
  return 0;
}

int runs(const Args& args) {
  const std::string verb = args.empty() ? "ls" : args[0];
  Session s;
  if (verb == "ls") {
    ledger::RunFilter filter;
    if (auto status = flag(args, "--status")) filter.status = ledger::parse_run_status(*status);
    filter.thread_key = flag(args, "--thread");
    filter.limit = int_flag(args, "--limit", 50);
    std::printf("%-36s  %-11s  %4s  %-12s  %-24s  %s\n", "RUN", "STATUS", "GEN", "OWNER", "THREAD",
                "CREATED");
    for (const auto& run : s.ledger.list(filter)) {
      std::printf("%-36s  %-11s  %4lld  %-12s  %-24s  %s\n", run.run_id.value().c_str(),
                  std::string(to_string(run.status)).c_str(),
                  static_cast<long long>(run.generation.value()),
                  run.owner ? run.owner->slot.value().c_str() : "-", run.thread_key.c_str(),
                  run.created_at.c_str());
    }
    return 0;
  }
  if (args.size() < 2) throw InvalidArgument("runs " + verb + " needs a RUN_ID");
  const RunId run = RunId::parse(args[1]);
  if (verb == "show") {
    print(ledger::to_json(s.ledger.get(run)));
    return 0;
  }
  if (verb == "cancel") {
    s.ledger.cancel(run, required(args, "--by"));
    print(ledger::to_json(s.ledger.get(run)));
    return 0;
  }
  throw InvalidArgument("unknown runs command '" + verb + "' (ls, show, cancel)");
}

int sweep(const Args&) {
  Session s;
  std::cout << "deleted " << s.ledger.sweep_retention() << " runs\n";
  return 0;
}

}  // namespace runledger::cli
