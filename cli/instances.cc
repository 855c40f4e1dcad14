// `runledger instances`: create workflow instances, send them events, and read them, through
// coordinator::Coordinator with the built-in workflows (cli/workflows.h). Needs no running
// coordinator; `runledger coordinator` executes what is created here.
#include <cstdio>
#include <iostream>
#include <map>
#include <set>

#include "cli/cli.h"
#include "cli/workflows.h"
#include "coordinator/coordinator.h"
#include "errors/errors.h"
#include "ids/ids.h"

namespace runledger::cli {
namespace {

using coordinator::json;

constexpr const char* kVerbs =
    "create, ls, show, history, send-event, pause, resume, terminate, restart";

// The arguments after the verb: positionals, `--name value` pairs from `allowed`, and bare
// `--name` switches from `switches` (stored as "true").
struct Parsed {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;

  std::optional<std::string> get(const std::string& name) const {
    const auto it = flags.find(name);
    return it == flags.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  std::string required(const std::string& name) const {
    auto value = get(name);
    if (!value) throw InvalidArgument(name + " is required");
    return *value;
  }
};

Parsed parse(const Args& args, const std::string& verb, const std::set<std::string>& allowed,
             std::size_t positionals, const std::string& usage,
             const std::set<std::string>& switches = {}) {
  Parsed out;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (switches.contains(a)) {
      if (!out.flags.emplace(a, "true").second) throw InvalidArgument(a + " given twice");
    } else if (a.starts_with("--")) {
      if (!allowed.contains(a)) {
        throw InvalidArgument("instances " + verb + ": unknown option '" + a.substr(0, 64) +
                              "' (usage: instances " + usage + ")");
      }
      if (i + 1 >= args.size()) throw InvalidArgument(a + " needs a value");
      if (!out.flags.emplace(a, args[i + 1]).second) throw InvalidArgument(a + " given twice");
      ++i;
    } else {
      out.positional.push_back(a);
    }
  }
  if (out.positional.size() != positionals) {
    throw InvalidArgument(
        "instances " + verb + ": expected " +
        (positionals == 0 ? std::string("no positional argument") : std::string("an instance id")) +
        " (usage: instances " + usage + ")");
  }
  return out;
}

json parse_json(const std::string& text, const std::string& name) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at ...": keep what follows.
    std::string why = e.what();
    if (const auto end = why.find("] "); end != std::string::npos) why = why.substr(end + 2);
    throw InvalidArgument(name + " is not valid JSON: " + why, {{"field", name}});
  }
}

json step_json(const coordinator::StepRecord& s) {
  return {{"step_key", s.step_key},
          {"kind", s.kind},
          {"state", s.state},
          {"attempts", s.attempts},
          {"config", s.config},
          {"output", s.output},
          {"error", s.error},
          {"due_at", s.due_at ? json(*s.due_at) : json()},
          {"generation", s.generation.value()}};
}

void print(const json& j) {
  std::cout << j.dump(2) << "\n";
}

struct Session {
  coordinator::Registry registry = builtin_workflows();
  pg::Pool pool{database_url(), 1};
  coordinator::Coordinator client{pool, registry};
};

}  // namespace

int instances(const Args& args) {
  if (args.empty()) {
    throw InvalidArgument(std::string("instances needs a command (") + kVerbs + ")");
  }
  const std::string& verb = args[0];
  if (verb == "create") {
    const auto p = parse(args, verb, {"--workflow", "--id", "--input"}, 0,
                         "create --workflow W --id ID [--input JSON]");
    const std::string workflow = p.required("--workflow");
    const std::string id = p.required("--id");
    const json input = p.get("--input") ? parse_json(*p.get("--input"), "--input") : json::object();
    Session s;
    const auto created = s.client.create(workflow, id, input);
    json out = coordinator::to_json(created.instance);
    out["created"] = created.created;
    print(out);
    return 0;
  }
  if (verb == "ls") {
    const auto p = parse(args, verb, {"--status", "--limit"}, 0, "ls [--status S] [--limit N]");
    std::optional<coordinator::InstanceStatus> status;
    if (const auto name = p.get("--status")) status = coordinator::parse_instance_status(*name);
    const int limit = positive(p.get("--limit"), "--limit", 50);
    Session s;
    const auto found = s.client.list(status, limit);
    std::printf("%-32s  %-24s  %-10s  %s\n", "INSTANCE", "WORKFLOW@VERSION", "STATUS", "UPDATED");
    for (const auto& i : found) {
      const std::string workflow = i.workflow + "@" + std::to_string(i.version);
      std::printf("%-32s  %-24s  %-10s  %s\n", i.instance_id.c_str(), workflow.c_str(),
                  std::string(coordinator::to_string(i.status)).c_str(), i.updated_at.c_str());
    }
    return 0;
  }
  if (verb == "show") {
    const auto p = parse(args, verb, {}, 1, "show ID");
    Session s;
    json out = coordinator::to_json(s.client.get(p.positional[0]));
    json steps = json::array();
    for (const auto& step : s.client.steps(p.positional[0])) steps.push_back(step_json(step));
    out["steps"] = std::move(steps);
    print(out);
    return 0;
  }
  if (verb == "history") {
    const auto p = parse(args, verb, {}, 1, "history ID");
    Session s;
    const auto entries = s.client.history(p.positional[0]);
    std::printf("%-29s  %4s  %-16s  %-16s  %s\n", "AT", "GEN", "WHAT", "STEP", "DETAIL");
    for (const auto& h : entries) {
      std::printf("%-29s  %4s  %-16s  %-16s  %s\n", h.at.c_str(),
                  h.generation ? std::to_string(*h.generation).c_str() : "-", h.what.c_str(),
                  h.step_key ? h.step_key->c_str() : "-",
                  h.detail.is_null() ? "-" : h.detail.dump().c_str());
    }
    return 0;
  }
  if (verb == "send-event") {
    const auto p = parse(args, verb, {"--type", "--payload", "--dedupe-key", "--by"}, 1,
                         "send-event ID --type T [--payload JSON] [--dedupe-key K] [--by NAME]");
    const std::string type = p.required("--type");
    const json payload =
        p.get("--payload") ? parse_json(*p.get("--payload"), "--payload") : json::object();
    if (!payload.is_object()) {
      throw InvalidArgument("--payload must be a JSON object", {{"field", "--payload"}});
    }
    const std::string dedupe_key = p.get("--dedupe-key").value_or(random_uuid());
    Session s;
    const bool is_new = s.client.send_event(p.positional[0], type, payload, dedupe_key,
                                            p.get("--by").value_or("cli"));
    print({{"instance_id", p.positional[0]},
           {"type", type},
           {"dedupe_key", dedupe_key},
           {"new", is_new}});
    return 0;
  }
  if (verb == "pause" || verb == "resume" || verb == "terminate") {
    const bool terminate = verb == "terminate";
    const auto p =
        parse(args, verb, {"--by"}, 1, verb + " ID --by NAME" + (terminate ? " [--rollback]" : ""),
              terminate ? std::set<std::string>{"--rollback"} : std::set<std::string>{});
    const std::string by = p.required("--by");
    Session s;
    if (verb == "pause") s.client.pause(p.positional[0], by);
    if (verb == "resume") s.client.resume(p.positional[0], by);
    if (terminate) s.client.terminate(p.positional[0], by, p.get("--rollback").has_value());
    print(coordinator::to_json(s.client.get(p.positional[0])));
    return 0;
  }
  if (verb == "restart") {
    const auto p =
        parse(args, verb, {"--step", "--by"}, 1, "restart ID --step NAME#COUNT --by NAME");
    Session s;
    const int discarded =
        s.client.restart(p.positional[0], p.required("--step"), p.required("--by"));
    json out = coordinator::to_json(s.client.get(p.positional[0]));
    out["discarded_steps"] = discarded;
    print(out);
    return 0;
  }
  throw InvalidArgument("unknown instances command '" + verb.substr(0, 64) + "' (" + kVerbs + ")");
}

}  // namespace runledger::cli
