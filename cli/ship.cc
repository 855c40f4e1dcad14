// `runledger ship`, `threads`, `policy` and `merge-actor`: the ship pipeline from the command
// line, and the stand-in for the person who merges (tests and the demo).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <spdlog/spdlog.h>

#include "cli/cli.h"
#include "cli/workflows.h"
#include "coordinator/coordinator.h"
#include "coordinator/ship/ship.h"
#include "errors/errors.h"

namespace runledger::cli {
namespace {

using coordinator::json;

std::string required(const Args& args, const std::string& name, const std::string& usage) {
  const auto value = flag(args, name);
  if (!value) throw InvalidArgument(name + " is required: " + usage);
  return *value;
}

volatile std::sig_atomic_t merge_actor_stop = 0;
extern "C" void stop_merge_actor(int) {
  merge_actor_stop = 1;
}

}  // namespace

int ship_command(const Args& args) {
  const std::string usage =
      "ship --thread T --message M --requester U [--review-verdicts v1,v2,...] \"request\"";
  const std::string thread = required(args, "--thread", usage);
  const std::string message = required(args, "--message", usage);
  const std::string requester = required(args, "--requester", usage);
  if (args.size() % 2 == 0 || args.back().empty() || args.back().rfind("--", 0) == 0) {
    throw InvalidArgument("the request text is the last argument: " + usage);
  }
  json input = {
      {"thread", thread}, {"message", message}, {"requester", requester}, {"request", args.back()}};
  if (const auto verdicts = flag(args, "--review-verdicts")) {
    json list = json::array();
    std::size_t start = 0;
    while (start <= verdicts->size()) {
      const auto comma = verdicts->find(',', start);
      const std::string v = verdicts->substr(start, comma - start);
      if (v != "approve" && v != "changes") {
        throw InvalidArgument("--review-verdicts: each is approve or changes, got '" + v + "'");
      }
      list.push_back(v);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    input["review_verdicts"] = list;
  }
  pg::Pool pool(database_url(), 1);
  const auto registry = builtin_workflows();
  coordinator::Coordinator client(pool, registry);
  const auto created = client.create("ship", ship::ship_instance_id(thread, message), input);
  json out = coordinator::to_json(created.instance);
  out["created"] = created.created;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int threads(const Args& args) {
  if (args.size() != 2 || args[0] != "show") {
    throw InvalidArgument("usage: threads show THREAD");
  }
  pg::Pool pool(database_url(), 1);
  ship::ThreadOutbox outbox(pool);
  for (const auto& m : outbox.messages(args[1])) {
    std::printf("%s  %s\n", m.created_at.c_str(), m.body.c_str());
  }
  return 0;
}

int policy(const Args& args) {
  const std::string usage = "policy grant|revoke --requester U --capability C";
  if (args.empty() || (args[0] != "grant" && args[0] != "revoke")) {
    throw InvalidArgument("usage: " + usage);
  }
  const Args rest(args.begin() + 1, args.end());
  const std::string requester = required(rest, "--requester", usage);
  const std::string capability = required(rest, "--capability", usage);
  pg::Pool pool(database_url(), 1);
  ship::Policy p(pool);
  if (args[0] == "grant") {
    p.grant(requester, capability);
  } else {
    p.revoke(requester, capability);
  }
  std::printf("%s %s %s\n", args[0] == "grant" ? "granted" : "revoked", requester.c_str(),
              capability.c_str());
  return 0;
}

int merge_actor(const Args& args) {
  const std::string usage = "merge-actor --ship-repo BARE_REPO [--delay-ms N]";
  const std::filesystem::path repo =
      std::filesystem::absolute(required(args, "--ship-repo", usage));
  const std::chrono::milliseconds delay(positive(args, "--delay-ms", 2000));
  pg::Pool pool(database_url(), 1);
  ship::LocalForge forge(pool, repo);
  std::signal(SIGTERM, stop_merge_actor);
  std::signal(SIGINT, stop_merge_actor);
  spdlog::info("merge actor: merging approved change requests of {} after {} ms", repo.string(),
               delay.count());
  while (!merge_actor_stop) {
    try {
      for (const auto& change : forge.approved_open(delay)) {
        const auto merged = forge.merge(change.id);
        spdlog::info("merged change request {} ({}) as {}", merged.id, merged.branch,
                     merged.merge_sha.value_or("?"));
      }
    } catch (const std::exception& e) {
      spdlog::error("merge actor: {}", e.what());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return 0;
}

}  // namespace runledger::cli
