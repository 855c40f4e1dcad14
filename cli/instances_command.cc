// `runledger instances`: create workflow instances, send them events, and read them, through
// coordinator::Coordinator with the built-in workflows (cli/workflows.h). Needs no running
// coordinator; `runledger coordinator` executes what is created here.
#include <cstdio>
#include <iostream>

#include "cli/cli.h"
#include "cli/workflows.h"
#include "coordinator/coordinator.h"
#include "errors/errors.h"
#include "ids/ids.h"
#include "paging/paging.h"
#include "timestamps/timestamps.h"

namespace runledger::cli {
namespace {

using coordinator::json;

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
          {"kind", to_string(s.kind)},
          {"state", to_string(s.state)},
          {"attempts", s.attempts},
          {"config", s.config},
          {"output", s.output},
          {"error", s.error},
          {"due_at", s.due_at ? json(timestamps::rfc3339(*s.due_at)) : json()},
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

int create(const Arguments& args) {
  const std::string workflow = args.value("--workflow");
  const auto id = InstanceId::parse(args.value("--id"), "--id");
  const auto text = args.text("--input");
  const json input = text ? parse_json(*text, "--input") : json::object();
  Session s;
  const auto created = s.client.create(workflow, id, input);
  json out = coordinator::to_json(created.instance);
  out["created"] = created.created;
  print(out);
  return 0;
}

int ls(const Arguments& args) {
  const auto status_name = args.text("--status");
  const auto workflow = args.text("--workflow");
  if (status_name && workflow) throw InvalidArgument("give --status or --workflow, not both");
  const paging::PageRequest page{args.text("--cursor"), args.integer("--limit").value()};
  Session s;
  const auto found = status_name ? s.client.instances_with_status(
                                       coordinator::parse_instance_status(*status_name), page)
                     : workflow ? s.client.instances_of_workflow(*workflow, page)
                                : s.client.instances(page);
  std::printf("%-32s  %-24s  %-10s  %s\n", "INSTANCE", "WORKFLOW@VERSION", "STATUS", "UPDATED");
  for (const auto& i : found.items) {
    const std::string workflow = i.workflow + "@" + std::to_string(i.version);
    std::printf("%-32s  %-24s  %-10s  %s\n", i.instance_id.value().c_str(), workflow.c_str(),
                std::string(coordinator::to_string(i.status)).c_str(), i.updated_at.c_str());
  }
  if (found.next_cursor) std::printf("more: --cursor %s\n", found.next_cursor->c_str());
  return 0;
}

int show(const Arguments& args) {
  const auto id = InstanceId::parse(args.positional("ID"), "ID");
  Session s;
  json out = coordinator::to_json(s.client.get(id));
  json steps = json::array();
  for (const auto& step : s.client.steps(id)) steps.push_back(step_json(step));
  out["steps"] = std::move(steps);
  print(out);
  return 0;
}

int history(const Arguments& args) {
  Session s;
  const auto entries = s.client.history(InstanceId::parse(args.positional("ID"), "ID"));
  std::printf("%-29s  %4s  %-16s  %-16s  %s\n", "AT", "GEN", "WHAT", "STEP", "DETAIL");
  for (const auto& h : entries) {
    std::printf("%-29s  %4s  %-16s  %-16s  %s\n", h.at.c_str(),
                h.generation ? std::to_string(*h.generation).c_str() : "-", h.what.c_str(),
                h.step_key ? h.step_key->c_str() : "-",
                h.detail.is_null() ? "-" : h.detail.dump().c_str());
  }
  return 0;
}

int send_event(const Arguments& args) {
  const auto id = InstanceId::parse(args.positional("ID"), "ID");
  const std::string type = args.value("--type");
  const auto text = args.text("--payload");
  const json payload = text ? parse_json(*text, "--payload") : json::object();
  if (!payload.is_object()) {
    throw InvalidArgument("--payload must be a JSON object", {{"field", "--payload"}});
  }
  const std::string dedupe_key = args.text("--dedupe-key").value_or(random_uuid());
  Session s;
  const bool is_new = s.client.send_event(id, type, payload, dedupe_key, args.value("--by"));
  print({{"instance_id", id.value()}, {"type", type}, {"dedupe_key", dedupe_key}, {"new", is_new}});
  return 0;
}

// pause, resume and terminate: an operator action, then the instance.
int operator_action(const std::string& verb, const Arguments& args) {
  const auto id = InstanceId::parse(args.positional("ID"), "ID");
  const std::string by = args.value("--by");
  Session s;
  if (verb == "pause") s.client.pause(id, by);
  if (verb == "resume") s.client.resume(id, by);
  if (verb == "terminate") s.client.terminate(id, by, args.given("--rollback"));
  print(coordinator::to_json(s.client.get(id)));
  return 0;
}

int restart(const Arguments& args) {
  const auto id = InstanceId::parse(args.positional("ID"), "ID");
  Session s;
  const int discarded = s.client.restart(id, args.value("--step"), args.value("--by"));
  json out = coordinator::to_json(s.client.get(id));
  out["discarded_steps"] = discarded;
  print(out);
  return 0;
}

const Positional kId{.name = "ID", .help = "the instance's id"};

Option by(const std::string& what) {
  return {.name = "--by",
          .value = "NAME",
          .help = "who " + what + " (recorded in the instance's history)",
          .required = true};
}

Command operator_command(const std::string& verb, const std::string& summary,
                         std::vector<Option> extra = {}) {
  std::vector<Option> options = {by(verb + "s it")};
  options.insert(options.end(), extra.begin(), extra.end());
  return {.name = verb,
          .summary = summary,
          .options = std::move(options),
          .positionals = {kId},
          .run = [verb](const Arguments& args) { return operator_action(verb, args); }};
}

}  // namespace

Command instances_command() {
  return {
      .name = "instances",
      .summary =
          "create workflow instances, send them events, read them, and act on them as an "
          "operator (a running `runledger coordinator` executes them)",
      .subcommands =
          {
              {.name = "create",
               .summary = "create an instance (or print the one the id names, with \"created\": "
                          "false)",
               .options = {{.name = "--workflow",
                            .value = "W",
                            .help = "a built-in workflow: demo.approval or ship",
                            .required = true},
                           {.name = "--id",
                            .value = "ID",
                            .help = "the instance's id, chosen by the caller",
                            .required = true},
                           {.name = "--input",
                            .value = "JSON",
                            .help = "the workflow's input",
                            .fallback = "{}"}},
               .run = create},
              {.name = "ls",
               .summary = "list instances, newest first: id, workflow@version, status, last "
                          "update; a last line `more: --cursor C` when more follow",
               .options = {{.name = "--status", .value = "S", .help = "only instances in status S"},
                           {.name = "--workflow", .value = "W", .help = "only instances of W"},
                           {.name = "--cursor", .value = "C", .help = "the page after cursor C"},
                           {.name = "--limit",
                            .value = "N",
                            .help = "at most N instances (1-1000)",
                            .integer = kPositive,
                            .fallback = "50"}},
               .run = ls},
              {.name = "show",
               .summary = "the instance and its steps (JSON)",
               .positionals = {kId},
               .run = show},
              {.name = "history",
               .summary = "one line per history entry: time, generation, what, step, detail",
               .positionals = {kId},
               .run = history},
              {.name = "send-event",
               .summary = "send the instance an event; prints whether it was new",
               .options =
                   {{.name = "--type", .value = "T", .help = "the event's type", .required = true},
                    {.name = "--payload",
                     .value = "JSON",
                     .help = "the event's payload, a JSON object",
                     .fallback = "{}"},
                    {.name = "--dedupe-key",
                     .value = "K",
                     .help = "an event with a key already sent is not delivered again "
                             "(default a random UUID)"},
                    {.name = "--by",
                     .value = "NAME",
                     .help = "who sends it (recorded in the instance's history)",
                     .fallback = "cli"}},
               .positionals = {kId},
               .run = send_event},
              operator_command("pause", "pause a queued, running or waiting instance"),
              operator_command("resume", "queue a paused instance again"),
              operator_command("terminate", "end an unfinished instance as terminated",
                               {{.name = "--rollback",
                                 .help = "run the compensations of its succeeded steps first"}}),
              {.name = "restart",
               .summary = "discard step NAME#COUNT and every step recorded after it, and queue "
                          "the instance: those steps run again",
               .options = {{.name = "--step",
                            .value = "NAME#COUNT",
                            .help = "the step key to restart from, e.g. greet#1",
                            .required = true},
                           by("restarts it")},
               .positionals = {kId},
               .run = restart},
          },
  };
}

}  // namespace runledger::cli
