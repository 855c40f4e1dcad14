// One execution of a workflow against its record: memoized steps, retries, sleeps, waits,
// branches and spawns, each new fact written in one statement.
#include "coordinator/replay.h"

#include <thread>

#include "coordinator/attempt.h"
#include "coordinator/rows.h"
#include "coordinator/statements.h"
#include "digest/digest.h"
#include "errors/errors.h"
#include "failpoint/failpoint.h"

namespace runledger::coordinator {
namespace {

std::string child_dispatch_key(const std::string& instance_id, const std::string& step_key,
                               int restarts) {
  // After a restart the same step key names a new child, not the one the discarded step had.
  const std::string restarted = restarts > 0 ? ":r" + std::to_string(restarts) : "";
  std::string key = "wf:" + instance_id + ":" + step_key + restarted;
  if (key.size() <= 255) return key;
  return "wf:" +
         digest::hex(digest::Sha256().update(instance_id + ":" + step_key + restarted).finish());
}

}  // namespace

void after_journal_write() {
  failpoint::hit("coordinator.after_write");
}

Replay::Replay(pg::Pool& pool, StepRecorder& recorder, ledger::Ledger& ledger,
               const Registry& registry, const Options& options, ClaimedInstance claimed,
               const std::atomic<bool>& lost)
    : pool_(pool),
      recorder_(recorder),
      ledger_(ledger),
      registry_(registry),
      options_(options),
      claimed_(std::move(claimed)),
      lost_(lost),
      claimed_at_(std::chrono::steady_clock::now()),
      root_(std::make_unique<Scope>(*this, "")) {}

std::chrono::milliseconds Replay::elapsed() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               claimed_at_);
}

std::string Replay::current_step() const {
  std::lock_guard lock(mu_);
  return current_;
}

std::optional<json> Replay::fatal() const {
  std::lock_guard lock(mu_);
  return fatal_;
}

std::optional<Unavailable> Replay::unavailable() const {
  std::lock_guard lock(mu_);
  return unavailable_;
}

void Replay::met_unavailable(const Unavailable& e) {
  std::lock_guard lock(mu_);
  if (!unavailable_) unavailable_ = e;
}

bool Replay::has_compensations() const {
  std::lock_guard lock(mu_);
  for (const auto& [key, rec] : claimed_.steps) {
    if (rec["kind"] == "run" && rec["state"] == "succeeded" && rec["config"].is_object() &&
        rec["config"].contains("compensation")) {
      return true;
    }
  }
  return false;
}

void Replay::begin(const std::string& key) {
  if (fenced_ || lost_) refused("step " + key);
  bool over = false;
  {
    std::lock_guard lock(mu_);
    current_ = key;
    over = ++calls_ > options_.max_steps;
  }
  if (over) {
    fail_fatal(key, "step_limit",
               "step " + key + " is over the limit of " + std::to_string(options_.max_steps) +
                   " steps per execution");
  }
}

const json* Replay::record(const std::string& key, std::string_view kind) {
  const json* rec = nullptr;
  {
    std::lock_guard lock(mu_);
    const auto it = claimed_.steps.find(key);
    if (it == claimed_.steps.end()) return nullptr;
    rec = &it->second;
  }
  const std::string recorded = (*rec)["kind"];
  if (recorded != kind) {
    const std::string message = "non-determinism at step " + key + ": the record holds a " +
                                recorded + " step, this execution called " + std::string(kind);
    {
      std::lock_guard lock(mu_);
      if (!fatal_) fatal_ = json{{"message", message}, {"step", key}, {"kind", "non_determinism"}};
    }
    throw NonDeterminism(key, message);
  }
  return rec;
}

void Replay::remember(const std::string& key, json rec) {
  std::lock_guard lock(mu_);
  claimed_.steps[key] = std::move(rec);
}

bool Replay::due(const json& record) const {
  const auto& due_in = record["due_in_ms"];
  return due_in.is_null() || due_in.get<std::int64_t>() <= elapsed().count();
}

void Replay::check_deadline(const std::string& key) {
  if (claimed_.deadline_in_ms > elapsed().count()) return;
  fail_fatal(key, "deadline",
             "instance " + claimed_.instance_id + " exceeded the maximum duration of workflow " +
                 claimed_.workflow + " in step " + key);
}

void Replay::fail_fatal(const std::string& key, const std::string& kind,
                        const std::string& message) {
  {
    std::lock_guard lock(mu_);
    if (!fatal_) fatal_ = json{{"message", message}, {"step", key}, {"kind", kind}};  // the first
  }
  throw StepError(key, kind, message);
}

void Replay::refused(const std::string& what) {
  fenced_ = true;
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kGeneration, claimed_.instance_id);
  const std::string now_at = rows.empty() ? "gone" : rows[0][0].as<std::string>();
  throw FencedError(
      what + " refused: instance " + claimed_.instance_id + " is no longer held at generation " +
          std::to_string(claimed_.generation.value()) + " (now " + now_at + ")",
      {{"instance_id", claimed_.instance_id}, {"generation", claimed_.generation.value()}});
}

bool Replay::record_step(const std::string& key, std::string_view kind, const json& config,
                         std::string_view state, int attempts, const json& output,
                         const json& error, std::optional<std::int64_t> due_in_ms,
                         std::string_view what, const json& detail) {
  const std::optional<bool> due = recorder_.record(
      StepRow{claimed_.instance_id, claimed_.generation, key, std::string(kind), config,
              std::string(state), attempts, output, error, due_in_ms, std::string(what), detail});
  if (!due) refused("recording step " + key);
  after_journal_write();
  remember(key, json{{"kind", kind},
                     {"state", state},
                     {"attempts", attempts},
                     {"config", config},
                     {"output", output},
                     {"error", error},
                     {"due_in_ms", nullptr}});
  return *due;
}

json Replay::run(const std::string& key, const StepConfig& given,
                 const std::function<json(std::stop_token)>& body) {
  validate(given, key);
  StepConfig config = given;
  int attempts = 0;
  if (const json* rec = record(key, "run")) {
    const std::string state = (*rec)["state"];
    if (state == "succeeded") return (*rec)["output"];
    if (state == "failed") {
      throw StepError(key, (*rec)["error"].value("kind", "failed"),
                      (*rec)["error"].value("message", "step " + key + " failed"));
    }
    config = config_from_json((*rec)["config"]);  // the stored config wins
    attempts = (*rec)["attempts"];
    if (!due(*rec)) throw Suspended{{key}};
  }
  if (config.compensation && !registry_.find_compensation(*config.compensation)) {
    // Undoing the step would be impossible: refuse before its effect, not at rollback.
    throw InvalidArgument("step " + key + " names compensation '" + *config.compensation +
                          "', which is not registered");
  }
  const json config_json = config_to_json(config);
  for (;;) {
    check_deadline(key);
    const int attempt = attempts + 1;
    BodyOutcome outcome = run_body(config, body, attempt);
    if (lost_) refused("step " + key);
    if (outcome.value) {
      const std::size_t size = outcome.value->dump().size();
      if (size <= options_.max_value_bytes) {
        record_step(key, "run", config_json, "succeeded", attempt, *outcome.value, json(),
                    std::nullopt, "step succeeded", {{"attempt", attempt}});
        return *outcome.value;
      }
      outcome.kind = "value_too_large";
      outcome.failure = "step " + key + " returned " + std::to_string(size) +
                        " bytes of JSON, over the limit of " +
                        std::to_string(options_.max_value_bytes);
    }
    const bool final = outcome.kind == "non_retryable" || outcome.kind == "value_too_large" ||
                       attempt > config.retries;
    const json error = {{"message", outcome.failure}, {"kind", outcome.kind}};
    if (final) {
      record_step(key, "run", config_json, "failed", attempt, json(), error, std::nullopt,
                  "step failed", {{"attempt", attempt}, {"error", error}});
      throw StepError(key, outcome.kind, outcome.failure);
    }
    const std::int64_t delay = retry_delay_ms(config, attempt);
    const bool retry_now = record_step(
        key, "run", config_json, "pending", attempt, json(), error, delay, "attempt failed",
        {{"attempt", attempt}, {"error", error}, {"retry_in_ms", delay}});
    if (!retry_now) throw Suspended{{key}};
    attempts = attempt;
  }
}

// A recorded sleep: done, due (recorded as done now), or still to wait for.
void Replay::replay_sleep(const std::string& key, const json& rec) {
  if (rec["state"] == "succeeded") return;
  if (due(rec)) {
    record_step(key, "sleep", rec["config"], "succeeded", 0, json(), json(), std::nullopt, "woke",
                json::object());
    return;
  }
  check_deadline(key);
  throw Suspended{{key}};
}

void Replay::sleep(const std::string& key, std::optional<std::int64_t> until_unix_ms,
                   std::optional<std::int64_t> duration_ms) {
  if (const json* rec = record(key, "sleep")) return replay_sleep(key, *rec);
  check_deadline(key);
  bool is_due = false;
  {
    const auto until = int_text(until_unix_ms), duration = int_text(duration_ms);
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows =
        pg::exec(tx, sql::kRecordSleep, claimed_.instance_id, claimed_.generation.value(), key,
                 pg::nullable(until), pg::nullable(duration));
    if (rows[0][0].as<int>() == 0 || rows[0][1].is_null()) refused("sleep " + key);
    is_due = rows[0][1].as<bool>();
  }
  after_journal_write();
  remember(key, json{{"kind", "sleep"},
                     {"state", "pending"},
                     {"due_in_ms", is_due ? json(0) : json(INT64_MAX)}});
  if (!is_due) throw Suspended{{key}};
}

json Replay::wait(const std::string& key, std::string_view kind, const json& alternatives,
                  std::int64_t timeout_ms) {
  if (timeout_ms <= 0) {
    throw InvalidArgument("wait " + key + " needs a positive timeout: nothing waits unbounded");
  }
  for (const auto& a : alternatives) {
    if (!a["match"].is_object()) throw InvalidArgument("wait " + key + ": match is a JSON object");
  }
  json config = kind == "wait" ? json{{"type", alternatives[0]["type"]},
                                      {"match", alternatives[0]["match"]},
                                      {"timeout_ms", timeout_ms}}
                               : json{{"any", alternatives}, {"timeout_ms", timeout_ms}};
  const json* rec = record(key, kind);
  if (rec) {
    const std::string state = (*rec)["state"];
    if (state == "succeeded") return (*rec)["output"];
    if (state == "failed") {
      throw EventTimeout(key, "event_timeout",
                         (*rec)["error"].value("message", "wait " + key + " timed out"));
    }
    config = (*rec)["config"];  // the stored wait wins
  }
  const json stored = config.contains("any")
                          ? config["any"]
                          : json::array({{{"type", config["type"]}, {"match", config["match"]}}});
  check_deadline(key);
  json output;
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows = pg::exec(tx, sql::kWait, claimed_.instance_id, claimed_.generation.value(),
                               key, std::string(kind), stored.dump(), config.dump(),
                               config["timeout_ms"].get<std::int64_t>());
    if (rows[0][0].as<int>() == 0) refused("wait " + key);
    if (!rows[0][1].is_null()) output = json::parse(rows[0][1].c_str());
  }
  after_journal_write();
  if (!output.is_null()) {
    remember(key, json{{"kind", kind}, {"state", "succeeded"}, {"output", output}});
    return output;
  }
  if (rec && due(*rec)) {
    std::string waited_for;
    for (const auto& a : stored) {
      waited_for += (waited_for.empty() ? "" : " or ") +
                    ("'" + a["type"].get<std::string>() + "' matching " + a["match"].dump());
    }
    const std::string message = "wait " + key + " for event " + waited_for + " timed out after " +
                                std::to_string(config["timeout_ms"].get<std::int64_t>()) + " ms";
    record_step(key, kind, config, "failed", 0, json(),
                {{"message", message}, {"kind", "event_timeout"}}, std::nullopt, "timed out",
                {{"message", message}});
    throw EventTimeout(key, "event_timeout", message);
  }
  throw Suspended{{key}};
}

RunId Replay::spawn(const std::string& key, ledger::DispatchRequest request) {
  if (const json* rec = record(key, "spawn")) {
    const std::string state = (*rec)["state"];
    if (state == "succeeded") return RunId((*rec)["output"]["run_id"].get<std::string>());
    if (state == "failed") {
      throw StepError(key, "failed", (*rec)["error"].value("message", "spawn " + key + " failed"));
    }
  }
  check_deadline(key);
  request.dispatch_key = child_dispatch_key(claimed_.instance_id, key, claimed_.restarts);
  request.parent_instance = claimed_.instance_id;
  const json config = {{"dispatch_key", request.dispatch_key},
                       {"thread_key", request.thread_key},
                       {"requester", request.requester}};
  std::optional<ledger::Dispatched> dispatched;
  try {
    dispatched.emplace(ledger_.dispatch(request));
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unavailable) throw;
    const json error = {{"message", std::string("spawn ") + key + ": " + e.what()},
                        {"kind", "failed"}};
    record_step(key, "spawn", config, "failed", 1, json(), error, std::nullopt, "step failed",
                {{"error", error}});
    throw StepError(key, "failed", error["message"]);
  }
  const json output = {{"run_id", dispatched->run.run_id.value()},
                       {"created", dispatched->created}};
  record_step(key, "spawn", config, "succeeded", 1, output, json(), std::nullopt, "spawned",
              output);
  return dispatched->run.run_id;
}

// ---------------------------------------------------------------------------------------------
// Scope

std::string Scope::next_key(std::string_view name) {
  if (name.empty() || name.find('#') != std::string_view::npos) {
    throw InvalidArgument("a step name is not empty and has no '#': '" +
                          std::string(name.substr(0, 64)) + "'");
  }
  auto it = counts_.find(name);
  if (it == counts_.end()) it = counts_.emplace(std::string(name), 0).first;
  std::string key = prefix_ + std::string(name) + "#" + std::to_string(++it->second);
  replay_.begin(key);
  return key;
}

json Scope::run(std::string_view name, const StepConfig& config,
                const std::function<json(std::stop_token)>& body) {
  return replay_.guarded([&] { return replay_.run(next_key(name), config, body); });
}

void Scope::sleep(std::string_view name, std::chrono::milliseconds duration) {
  replay_.guarded([&] {
    replay_.sleep(next_key(name), std::nullopt, std::max<std::int64_t>(0, duration.count()));
  });
}

void Scope::sleep_until(std::string_view name, std::int64_t at_unix_ms) {
  replay_.guarded([&] { replay_.sleep(next_key(name), at_unix_ms, std::nullopt); });
}

json Scope::wait_for_event(std::string_view name, const EventWait& wait) {
  return replay_.guarded([&] {
    const std::string key = next_key(name);
    return replay_.wait(key, "wait", json::array({{{"type", wait.type}, {"match", wait.match}}}),
                        wait.timeout.count());
  });
}

AnyEvent Scope::wait_any(std::string_view name, const std::vector<EventMatch>& events,
                         std::chrono::milliseconds timeout) {
  return replay_.guarded([&] {
    const std::string key = next_key(name);
    if (events.empty()) throw InvalidArgument("wait_any " + key + " needs at least one event");
    json alternatives = json::array();
    for (const auto& e : events) alternatives.push_back({{"type", e.type}, {"match", e.match}});
    const json taken = replay_.wait(key, "wait_any", alternatives, timeout.count());
    return AnyEvent{taken["index"].get<std::size_t>(), taken["payload"]};
  });
}

RunId Scope::spawn(std::string_view name, ledger::DispatchRequest request) {
  return replay_.guarded([&] { return replay_.spawn(next_key(name), std::move(request)); });
}

namespace {

// Whether a branch's error ends the whole execution rather than just its branch: the instance
// was lost, the code disagrees with the record, or the database failed.
bool ends_execution(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const FencedError&) {
    return true;
  } catch (const NonDeterminism&) {
    return true;
  } catch (const Error& e) {
    return e.code() == ErrorCode::unavailable;
  } catch (...) {
    return false;
  }
}

}  // namespace

std::vector<json> Scope::all(std::string_view name, const std::vector<Branch>& branches) {
  const std::string key = replay_.guarded([&] { return next_key(name); });
  struct Outcome {
    std::optional<json> value;
    std::vector<std::string> suspended;
    std::exception_ptr error;
  };
  std::vector<Outcome> outcomes(branches.size());
  std::atomic<std::size_t> next{0};
  const auto drive = [&] {
    for (std::size_t i; (i = next++) < branches.size();) {
      Scope scope(replay_, key + "/" + std::to_string(i) + "/");
      try {
        outcomes[i].value = branches[i](scope);
      } catch (const Suspended& s) {
        outcomes[i].suspended = s.step_keys;
      } catch (...) {
        outcomes[i].error = std::current_exception();
      }
    }
  };
  const std::size_t width = std::min(branches.size(), replay_.max_branch_threads());
  if (width <= 1) {
    drive();
  } else {
    std::vector<std::jthread> threads;
    for (std::size_t t = 0; t < width; ++t) threads.emplace_back(drive);
  }
  const bool fatal =
      replay_.fenced() || replay_.unavailable().has_value() || replay_.fatal().has_value();
  for (const auto& o : outcomes) {
    if (o.error && (fatal || ends_execution(o.error))) std::rethrow_exception(o.error);
  }
  Suspended waiting;
  for (const auto& o : outcomes) {
    waiting.step_keys.insert(waiting.step_keys.end(), o.suspended.begin(), o.suspended.end());
  }
  if (!waiting.step_keys.empty()) throw waiting;
  std::vector<json> values;
  for (auto& o : outcomes) {
    if (o.error) std::rethrow_exception(o.error);
    values.push_back(std::move(*o.value));
  }
  return values;
}

}  // namespace runledger::coordinator
