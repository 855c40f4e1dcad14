// The ship workflow: authorize, code, pr-check, review/fix rounds, merge wait, deploy.
#include <algorithm>
#include <cctype>

#include "digest/digest.h"
#include "errors/errors.h"
#include "ids/ids.h"
#include "ship/ship.h"

namespace runledger::ship {
namespace {

using coordinator::json;
using coordinator::Step;

std::string short_hash(const std::string& text, std::size_t hex_chars) {
  return digest::hex(digest::Sha256().update(text).finish()).substr(0, hex_chars);
}

bool valid_instance_id(const std::string& id) {
  if (id.empty() || id.size() > 255) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' ||
           c == '-';
  });
}

// A key of at most 255 bytes: `readable` when it fits, else a hash of it under `prefix`.
std::string bounded_key(const std::string& readable, const std::string& prefix) {
  if (readable.size() <= 255) return readable;
  return prefix + short_hash(readable, 40);
}

// The coding child: set up the branch (from the remote branch when a fix round follows an
// earlier push), write SHIP.md, commit, push. A push whose result comes back synthetic is
// re-checked: the commit is pushed only if the remote branch does not have it yet.
json coding_script(const ShipOptions& o, const std::string& branch, const std::string& request,
                   int round) {
  const std::string repo = o.repository.string();
  return {
      {"vars", {{"repo", repo}, {"branch", branch}, {"main", o.main_branch}, {"round", round}}},
      {"turns",
       {{{"text", "I will set up branch ${branch}."},
         {"calls",
          {{{"id", "setup"},
            {"tool", "bash"},
            {"args",
             {{"command",
               "git init -q . 2>/dev/null; git remote add origin '${repo}' 2>/dev/null; "
               "git fetch -q origin && (git checkout -q -B '${branch}' 'origin/${branch}' "
               "2>/dev/null || git checkout -q -B '${branch}' 'origin/${main}')"}}},
            {"if_restarted",
             {{{"id", "setup-check"},
               {"tool", "bash"},
               {"args",
                {{"command",
                  "git rev-parse --abbrev-ref HEAD | grep -qx '${branch}' || "
                  "(git fetch -q origin && (git checkout -q -B '${branch}' 'origin/${branch}' "
                  "2>/dev/null || git checkout -q -B '${branch}' 'origin/${main}'))"}}}}}}}}}},
        {{"text", "Writing the change."},
         {"calls",
          {{{"id", "write"},
            {"tool", "write_file"},
            {"args",
             {{"path", "SHIP.md"},
              {"content", "# " + request + "\n\nround ${round}, run ${run_id}\n"}}}}}}},
        {{"text", "Committing."},
         {"calls",
          {{{"id", "commit"},
            {"tool", "bash"},
            {"args",
             {{"command",
               "git add -A && (git diff --cached --quiet || git -c user.name=runledger-bot "
               "-c user.email=bot@runledger.invalid commit -q -m 'ship: round ${round}')"}}},
            {"if_restarted",
             {{{"id", "commit-check"},
               {"tool", "bash"},
               {"args",
                {{"command",
                  "git add -A && (git diff --cached --quiet || git -c user.name=runledger-bot "
                  "-c user.email=bot@runledger.invalid commit -q -m 'ship: round "
                  "${round}')"}}}}}}}}}},
        {{"text", "Pushing ${branch}."},
         {"calls",
          {{{"id", "push"},
            {"tool", "git_push"},
            {"args", {{"remote", "origin"}, {"branch", "${branch}"}}},
            {"if_restarted",
             {{{"id", "push-check"},
               {"tool", "bash"},
               {"args",
                {{"command",
                  "git fetch -q origin && git merge-base --is-ancestor HEAD "
                  "'origin/${branch}' 2>/dev/null || git push -q origin '${branch}'"}}}}}}}}}}}},
      {"result", {{"branch", "${branch}"}, {"round", round}}}};
}

// The review child: looks at the branch and returns the scripted verdict.
json review_script(const ShipOptions& o, const std::string& branch, const std::string& verdict) {
  return {{"vars", {{"repo", o.repository.string()}, {"branch", branch}}},
          {"turns",
           {{{"text", "Reviewing ${branch}."},
             {"calls",
              {{{"id", "look"},
                {"tool", "bash"},
                {"args", {{"command", "git ls-remote '${repo}' 'refs/heads/${branch}'"}}}}}}}}},
          {"result", {{"verdict", verdict}}}};
}

class Pipeline {
 public:
  Pipeline(const ShipOptions& o, Forge& forge, Deployer& deployer, ThreadOutbox& outbox,
           Policy& policy, ledger::Ledger& ledger, const json& input, Step& step)
      : o_(o),
        forge_(forge),
        deployer_(deployer),
        outbox_(outbox),
        policy_(policy),
        ledger_(ledger),
        step_(step),
        id_(step.instance_id().value()),
        thread_(input.at("thread").get<std::string>()),
        requester_(input.at("requester").get<std::string>()),
        request_(input.at("request").get<std::string>()),
        verdicts_(input.value("review_verdicts", json::array())),
        branch_("ship-" + short_hash(id_, 12)) {
    const json budget = input.value("budget", json::object());
    remaining_ = ledger::Budget{budget.value("wall_s", o.pipeline_budget.wall_s),
                                budget.value("max_steps", o.pipeline_budget.max_steps)};
  }

  json run() {
    say("started", "On it: \"" + request_ + "\" (pipeline " + id_ +
                       "). I will post each stage "
                       "here; you can keep chatting meanwhile.");
    if (!authorize("agent:run:coding", "code")) return {{"status", "refused"}};
    if (auto stop =
            child_failed(run_child("coding", "code", coding_script(o_, branch_, request_, 1))))
      return *stop;
    say("coded", "Pushed branch " + branch_ + ".");
    const std::int64_t change = step_
                                    .run("pr-check",
                                         [&](std::stop_token) {
                                           const auto opened =
                                               forge_.open_or_update(branch_, title(), body(1));
                                           return json(opened.change.id);
                                         })
                                    .get<std::int64_t>();
    say("pr", "Change request #" + std::to_string(change) + " is open for " + branch_ + ".");

    for (int round = 1;; ++round) {
      const std::string r = std::to_string(round);
      if (!authorize("agent:run:review", "review-" + r)) return {{"status", "refused"}};
      const json review =
          run_child("review", "review-" + r, review_script(o_, branch_, verdict_for(round)));
      if (auto stop = child_failed(review)) return *stop;
      const std::string verdict = review["result"].value("verdict", "changes");
      say("review-" + r, "Review round " + r + ": " + verdict + ".");
      if (verdict == "approve") break;
      if (round >= o_.review_rounds) {
        say("rounds-exhausted", "Still not approved after " + r +
                                    " review rounds; stopping here. The change request stays "
                                    "open for a person.");
        return {{"status", "changes_requested"}, {"change_request", change}};
      }
      if (!authorize("agent:run:coding", "fix-" + r)) return {{"status", "refused"}};
      if (auto stop = child_failed(
              run_child("coding", "fix-" + r, coding_script(o_, branch_, request_, round + 1))))
        return *stop;
      step_.run("pr-update", [&](std::stop_token) {
        return json(forge_.open_or_update(branch_, title(), body(round + 1)).change.id);
      });
      say("fixed-" + r, "Pushed fixes for review round " + r + ".");
    }

    step_.run("approve", [&](std::stop_token) {
      forge_.approve(change);
      return json(true);
    });
    say("approved",
        "Change request #" + std::to_string(change) + " is approved; waiting for it to be merged.");
    std::string sha;
    const auto polls =
        std::clamp<std::int64_t>(o_.merge_timeout / o_.merge_poll, 1, o_.max_merge_polls);
    for (std::int64_t i = 0; i < polls && sha.empty(); ++i) {
      try {
        const json merged =
            step_.wait_for_event("merge", {"merged", {{"change_request", change}}, o_.merge_poll});
        (void)merged;
      } catch (const coordinator::EventTimeout&) {
        // No webhook: the poll below asks the forge.
      }
      const json state = step_.run("poll-merge", [&](std::stop_token) {
        const auto c = forge_.get(change);
        return json{{"state", to_string(c.state)},
                    {"sha", c.merge_sha ? json(*c.merge_sha) : json()}};
      });
      if (state["state"] == "merged") sha = state["sha"].get<std::string>();
      if (state["state"] == "closed") {
        say("closed", "Change request #" + std::to_string(change) + " was closed; stopping.");
        return {{"status", "closed"}, {"change_request", change}};
      }
    }
    if (sha.empty()) {
      say("merge-timeout",
          "Change request #" + std::to_string(change) + " was not merged in time; stopping.");
      return {{"status", "merge_timeout"}, {"change_request", change}};
    }
    say("merged", "Merged as " + sha.substr(0, 12) + "; deploying.");
    const json deployed = step_.run("deploy", [&](std::stop_token) {
      const auto d = deployer_.deploy(id_, sha);
      return json{{"sha", d.sha}, {"path", d.path.string()}};
    });
    say("deployed", "Deployed " + sha.substr(0, 12) + ". Done.");
    return {{"status", "deployed"},
            {"change_request", change},
            {"branch", branch_},
            {"sha", deployed["sha"]}};
  }

 private:
  std::string title() const { return "ship: " + request_.substr(0, 80); }
  std::string body(int round) const {
    return request_ + "\n\nRequested by " + requester_ + " in " + thread_ + " (pipeline " + id_ +
           ", round " + std::to_string(round) + ").";
  }

  std::string verdict_for(int round) const {
    if (verdicts_.is_array() && round <= static_cast<int>(verdicts_.size()) &&
        verdicts_[round - 1].is_string()) {
      return verdicts_[round - 1].get<std::string>();
    }
    return "approve";
  }

  // A message to the thread, posted once (the outbox dedupes on instance and stage; the step
  // memoizes it).
  void say(const std::string& stage, const std::string& text) {
    step_.run("say-" + stage, [&](std::stop_token) {
      return json(outbox_.post(thread_, bounded_key(id_ + "/" + stage, "msg-"), text));
    });
  }

  bool authorize(const std::string& capability, const std::string& stage) {
    const bool allowed =
        step_
            .run("authorize",
                 [&](std::stop_token) { return json(policy_.allows(requester_, capability)); })
            .get<bool>();
    if (!allowed) {
      say("refused-" + stage, "Sorry " + requester_ + ": you are not allowed " + capability +
                                  ", so nothing was started for " + stage + ".");
    }
    return allowed;
  }

  // Spawns a child and waits for its end: {"run_id", "status", "result"}.
  json run_child(const std::string& kind, const std::string& stage, const json& script) {
    ledger::DispatchRequest request;
    request.thread_key = bounded_key(thread_ + "/" + id_ + "/" + stage, "ship-child-");
    request.requester = requester_;
    request.profile = {{"kind", kind}, {"script", script}};
    const ledger::Budget budget{
        std::max(1, std::min(o_.child_budget.wall_s, remaining_.wall_s)),
        std::max(1, std::min(o_.child_budget.max_steps, remaining_.max_steps))};
    remaining_.wall_s -= budget.wall_s;
    remaining_.max_steps -= budget.max_steps;
    request.budget = budget;
    const RunId child = step_.spawn(stage, request);
    try {
      return step_.wait_for_event(stage + "-done",
                                  {"run-finished",
                                   {{"run_id", child.value()}},
                                   std::chrono::seconds(budget.wall_s) + o_.child_wait_margin});
    } catch (const coordinator::EventTimeout&) {
      // Past its budget and the margin: read its record instead of waiting on.
      return step_.run(stage + "-record", [&](std::stop_token) {
        const auto run = ledger_.get(child);
        return json{{"run_id", child.value()},
                    {"status", ledger::to_string(run.status)},
                    {"result", run.result}};
      });
    }
  }

  // The pipeline's end when a child did not finish.
  std::optional<json> child_failed(const json& child) {
    const std::string status = child.value("status", "unknown");
    if (status == "finished") return std::nullopt;
    say("child-" + child.value("run_id", std::string("unknown")),
        "A child run ended " + status + " (run " + child.value("run_id", std::string("?")) +
            "); stopping here.");
    return json{{"status", "child_" + status}, {"run_id", child.value("run_id", json())}};
  }

  const ShipOptions& o_;
  Forge& forge_;
  Deployer& deployer_;
  ThreadOutbox& outbox_;
  Policy& policy_;
  ledger::Ledger& ledger_;
  Step& step_;
  std::string id_;
  std::string thread_;
  std::string requester_;
  std::string request_;
  json verdicts_;
  std::string branch_;
  ledger::Budget remaining_{0, 0};
};

}  // namespace

ShipWorkflow::ShipWorkflow(ShipOptions options, Forge& forge, Deployer& deployer,
                           ThreadOutbox& outbox, Policy& policy, ledger::Ledger& ledger)
    : options_(std::move(options)),
      forge_(forge),
      deployer_(deployer),
      outbox_(outbox),
      policy_(policy),
      ledger_(ledger) {
  if (options_.review_rounds < 1 || options_.merge_poll.count() <= 0 ||
      options_.merge_timeout.count() <= 0 || options_.max_merge_polls < 1) {
    throw InvalidArgument(
        "ship: review_rounds, merge_poll, merge_timeout and max_merge_polls must be positive");
  }
}

coordinator::json ShipWorkflow::run(const coordinator::json& input, coordinator::Step& step) {
  for (const char* field : {"thread", "requester", "request"}) {
    if (!input.contains(field) || !input[field].is_string()) {
      throw coordinator::NonRetryable(std::string("ship input needs a string \"") + field + "\"");
    }
  }
  return Pipeline(options_, forge_, deployer_, outbox_, policy_, ledger_, input, step).run();
}

InstanceId ship_instance_id(const std::string& thread, const std::string& message) {
  const std::string readable = "ship:" + thread + ":" + message;
  if (valid_instance_id(readable)) return InstanceId(readable);
  return InstanceId("ship:" + short_hash(thread + "\n" + message, 40));
}

}  // namespace runledger::ship
