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
#include "errors/errors.h"
#include "paging/paging.h"
#include "ship/ship.h"

namespace runledger::cli {
namespace {

using coordinator::json;

volatile std::sig_atomic_t merge_actor_stop = 0;
extern "C" void stop_merge_actor(int) {
  merge_actor_stop = 1;
}

int ship(const Arguments& args) {
  const std::string thread = args.value("--thread");
  const std::string message = args.value("--message");
  json input = {{"thread", thread},
                {"message", message},
                {"requester", args.value("--requester")},
                {"request", args.positional("REQUEST")}};
  if (const auto verdicts = args.text("--review-verdicts")) {
    json list = json::array();
    std::size_t start = 0;
    while (start <= verdicts->size()) {
      const auto comma = verdicts->find(',', start);
      const std::string v = verdicts->substr(start, comma - start);
      if (v != "approve" && v != "changes") {
        throw InvalidArgument("--review-verdicts: each is approve or changes, got '" +
                              v.substr(0, 64) + "'");
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

int threads_show(const Arguments& args) {
  pg::Pool pool(database_url(), 1);
  ship::ThreadOutbox outbox(pool);
  const std::string thread = args.positional("THREAD");
  const auto newest_first = paging::all_pages(
      [&](const paging::PageRequest& page) { return outbox.messages(thread, page); });
  // Printed as a chat reads: oldest first.
  for (auto m = newest_first.rbegin(); m != newest_first.rend(); ++m) {
    std::printf("%s  %s\n", m->created_at.c_str(), m->body.c_str());
  }
  return 0;
}

int policy_change(bool grant, const Arguments& args) {
  const std::string requester = args.value("--requester");
  const std::string capability = args.value("--capability");
  pg::Pool pool(database_url(), 1);
  ship::Policy p(pool);
  if (grant) {
    p.grant(requester, capability);
  } else {
    p.revoke(requester, capability);
  }
  std::printf("%s %s %s\n", grant ? "granted" : "revoked", requester.c_str(), capability.c_str());
  return 0;
}

int merge_actor(const Arguments& args) {
  const std::filesystem::path repo = std::filesystem::absolute(args.value("--ship-repo"));
  const std::chrono::milliseconds delay(args.integer("--delay-ms").value());
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

Command policy_subcommand(bool grant) {
  return {
      .name = grant ? "grant" : "revoke",
      .summary = grant ? "grant a requester a capability the ship pipeline checks "
                         "(agent:run:coding, agent:run:review)"
                       : "revoke a requester's capability",
      .options = {{.name = "--requester", .value = "U", .help = "who", .required = true},
                  {.name = "--capability", .value = "C", .help = "what", .required = true}},
      .run = [grant](const Arguments& args) { return policy_change(grant, args); },
  };
}

}  // namespace

Command ship_command() {
  return {
      .name = "ship",
      .summary =
          "start the ship pipeline for a chat message (once per message), print its "
          "instance",
      .options = {{.name = "--thread", .value = "T", .help = "the chat thread", .required = true},
                  {.name = "--message",
                   .value = "M",
                   .help = "the chat message's id in the thread",
                   .required = true},
                  {.name = "--requester",
                   .value = "U",
                   .help = "who asked (their capabilities decide what runs)",
                   .required = true},
                  {.name = "--review-verdicts",
                   .value = "V,...",
                   .help = "the scripted review's verdict per round, each approve or changes "
                           "(default all approve)"}},
      .positionals = {{.name = "REQUEST",
                       .help = "what the person asked for, e.g. \"Add a SHIP "
                               "file\""}},
      .run = ship,
  };
}

Command threads_command() {
  return {
      .name = "threads",
      .summary = "chat threads",
      .subcommands = {{.name = "show",
                       .summary = "the messages posted to a chat thread",
                       .positionals = {{.name = "THREAD", .help = "the thread"}},
                       .run = threads_show}},
  };
}

Command policy_command() {
  return {
      .name = "policy",
      .summary = "the capabilities of requesters",
      .subcommands = {policy_subcommand(true), policy_subcommand(false)},
  };
}

Command merge_actor_command() {
  return {
      .name = "merge-actor",
      .summary =
          "merge approved change requests after a delay (stands in for a person, in tests "
          "and the demo) until SIGTERM or SIGINT",
      .options = {{.name = "--ship-repo",
                   .value = "BARE_REPO",
                   .help = "the bare repository of the change requests",
                   .required = true},
                  {.name = "--delay-ms",
                   .value = "N",
                   .help = "milliseconds a change request stays approved before it is merged",
                   .integer = kPositive,
                   .fallback = "2000"}},
      .run = merge_actor,
  };
}

}  // namespace runledger::cli
