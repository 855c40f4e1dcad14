// One execution of a workflow against its record: memoized steps, retries, sleeps, waits and
// spawns, each new fact written in one statement.
#include "coordinator/replay.h"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "coordinator/statements.h"
#include "digest/digest.h"
#include "errors/errors.h"
#include "failpoint/failpoint.h"

namespace runledger::coordinator {
namespace {

constexpr std::string_view kBackoffNames[] = {"constant", "linear", "exponential"};

json config_to_json(const StepConfig& c) {
  json j = {{"retries", c.retries},
            {"delay_ms", c.delay.count()},
            {"backoff", kBackoffNames[static_cast<int>(c.backoff)]}};
  j["timeout_ms"] = c.timeout ? json(c.timeout->count()) : json();
  return j;
}

StepConfig config_from_json(const json& j) {
  StepConfig c;
  c.retries = j.value("retries", 0);
  c.delay = std::chrono::milliseconds(j.value("delay_ms", std::int64_t{0}));
  const std::string backoff = j.value("backoff", std::string("exponential"));
  for (std::size_t i = 0; i < std::size(kBackoffNames); ++i) {
    if (kBackoffNames[i] == backoff) c.backoff = static_cast<Backoff>(i);
  }
  if (j.contains("timeout_ms") && !j["timeout_ms"].is_null()) {
    c.timeout = std::chrono::milliseconds(j["timeout_ms"].get<std::int64_t>());
  }
  return c;
}

// Delay before retry number `retry` (1-based).
std::int64_t retry_delay_ms(const StepConfig& c, int retry) {
  const std::int64_t base = c.delay.count();
  switch (c.backoff) {
    case Backoff::constant:
      return base;
    case Backoff::linear:
      return base * retry;
    case Backoff::exponential:
      return base << std::min(retry - 1, 30);
  }
  return base;
}

void validate(const StepConfig& c, std::string_view name) {
  if (c.retries < 0 || c.delay.count() < 0 || (c.timeout && c.timeout->count() <= 0)) {
    throw InvalidArgument("step " + std::string(name) +
                          ": retries and delay must not be negative, a timeout must be positive");
  }
}

struct BodyOutcome {
  std::optional<json> value;
  std::string failure;  // when !value
  std::string kind;     // failed | non_retryable | timeout
};

// Runs the body on this thread; a watchdog triggers its stop token at the timeout, and a value
// returned after it is discarded (a C++ function cannot be preempted).
BodyOutcome run_body(const StepConfig& config, const std::function<json(std::stop_token)>& body,
                     int attempt) {
  std::stop_source stop;
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  std::jthread watchdog;
  const auto started = std::chrono::steady_clock::now();
  if (config.timeout) {
    watchdog = std::jthread([&, timeout = *config.timeout] {
      std::unique_lock lock(mu);
      if (!cv.wait_for(lock, timeout, [&] { return finished; })) stop.request_stop();
    });
  }
  const auto finish = [&] {
    {
      std::lock_guard lock(mu);
      finished = true;
    }
    cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
  };
  BodyOutcome out;
  try {
    out.value = body(stop.get_token());
  } catch (const NonRetryable& e) {
    out.failure = e.what();
    out.kind = "non_retryable";
  } catch (const std::exception& e) {
    out.failure = e.what();
    out.kind = "failed";
  }
  finish();
  if (config.timeout &&
      (stop.stop_requested() || std::chrono::steady_clock::now() - started > *config.timeout)) {
    out.value.reset();
    out.failure = "attempt " + std::to_string(attempt) + " timed out after " +
                  std::to_string(config.timeout->count()) + " ms";
    out.kind = "timeout";
  }
  return out;
}

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

Replay::Replay(pg::Pool& pool, ledger::Ledger& ledger, const Options& options,
               ClaimedInstance claimed, const std::atomic<bool>& lost)
    : pool_(pool),
      ledger_(ledger),
      options_(options),
      claimed_(std::move(claimed)),
      lost_(lost),
      claimed_at_(std::chrono::steady_clock::now()) {}

std::chrono::milliseconds Replay::elapsed() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               claimed_at_);
}

std::string Replay::next_key(std::string_view name) {
  if (name.empty() || name.find('#') != std::string_view::npos) {
    throw InvalidArgument("a step name is not empty and has no '#': '" +
                          std::string(name.substr(0, 64)) + "'");
  }
  if (fenced_ || lost_) refused("step " + std::string(name));
  auto it = counts_.find(name);
  if (it == counts_.end()) it = counts_.emplace(std::string(name), 0).first;
  current_ = std::string(name) + "#" + std::to_string(++it->second);
  if (++calls_ > options_.max_steps) {
    fail_fatal(current_, "step_limit",
               "step " + current_ + " is over the limit of " + std::to_string(options_.max_steps) +
                   " steps per execution");
  }
  return current_;
}

const json* Replay::record(const std::string& key, std::string_view kind) {
  const auto it = claimed_.steps.find(key);
  if (it == claimed_.steps.end()) return nullptr;
  const std::string recorded = it->second["kind"];
  if (recorded != kind) {
    const std::string message = "non-determinism at step " + key + ": the record holds a " +
                                recorded + " step, this execution called " + std::string(kind);
    if (!fatal_) fatal_ = json{{"message", message}, {"step", key}, {"kind", "non_determinism"}};
    throw NonDeterminism(key, message);
  }
  return &it->second;
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
  if (!fatal_) fatal_ = json{{"message", message}, {"step", key}, {"kind", kind}};  // the first
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
  const std::optional<std::string> output_text =
      output.is_null() ? std::nullopt : std::optional<std::string>(output.dump());
  const std::optional<std::string> error_text =
      error.is_null() ? std::nullopt : std::optional<std::string>(error.dump());
  const std::optional<std::string> due_text =
      due_in_ms ? std::optional<std::string>(std::to_string(*due_in_ms)) : std::nullopt;
  pqxx::result rows;
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    rows = pg::exec(tx, sql::kRecordStep, claimed_.instance_id, claimed_.generation.value(), key,
                    std::string(kind), config.dump(), std::string(state), attempts,
                    pg::nullable(output_text), pg::nullable(error_text), pg::nullable(due_text),
                    std::string(what), detail.dump());
  }
  if (rows.empty()) refused("recording step " + key);
  after_journal_write();
  claimed_.steps[key] =
      json{{"kind", kind},     {"state", state}, {"attempts", attempts}, {"config", config},
           {"output", output}, {"error", error}, {"due_in_ms", nullptr}};
  return rows[0][0].as<bool>();
}

json Replay::run(std::string_view name, const StepConfig& given,
                 const std::function<json(std::stop_token)>& body) {
  const std::string key = next_key(name);
  validate(given, name);
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
    if (!due(*rec)) throw Suspended{key};
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
    if (!retry_now) throw Suspended{key};
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
  throw Suspended{key};
}

void Replay::sleep(std::string_view name, std::chrono::milliseconds duration) {
  record_sleep(next_key(name), std::nullopt, std::max<std::int64_t>(0, duration.count()));
}

void Replay::sleep_until(std::string_view name, std::int64_t at_unix_ms) {
  record_sleep(next_key(name), at_unix_ms, std::nullopt);
}

void Replay::record_sleep(const std::string& key, std::optional<std::int64_t> until_unix_ms,
                          std::optional<std::int64_t> duration_ms) {
  if (const json* rec = record(key, "sleep")) return replay_sleep(key, *rec);
  check_deadline(key);
  bool is_due = false;
  {
    const auto text = [](std::optional<std::int64_t> v) {
      return v ? std::optional<std::string>(std::to_string(*v)) : std::nullopt;
    };
    const auto until = text(until_unix_ms), duration = text(duration_ms);
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows =
        pg::exec(tx, sql::kRecordSleep, claimed_.instance_id, claimed_.generation.value(), key,
                 pg::nullable(until), pg::nullable(duration));
    if (rows[0][0].as<int>() == 0 || rows[0][1].is_null()) refused("sleep " + key);
    is_due = rows[0][1].as<bool>();
  }
  after_journal_write();
  claimed_.steps[key] = json{
      {"kind", "sleep"}, {"state", "pending"}, {"due_in_ms", is_due ? json(0) : json(INT64_MAX)}};
  if (!is_due) throw Suspended{key};
}

json Replay::wait_for_event(std::string_view name, const EventWait& given) {
  const std::string key = next_key(name);
  if (given.timeout.count() <= 0) {
    throw InvalidArgument("wait " + key + " needs a positive timeout: nothing waits unbounded");
  }
  if (!given.match.is_object()) throw InvalidArgument("wait " + key + ": match is a JSON object");
  json config = {
      {"type", given.type}, {"match", given.match}, {"timeout_ms", given.timeout.count()}};
  const json* rec = record(key, "wait");
  if (rec) {
    const std::string state = (*rec)["state"];
    if (state == "succeeded") return (*rec)["output"];
    if (state == "failed") {
      throw EventTimeout(key, "event_timeout",
                         (*rec)["error"].value("message", "wait " + key + " timed out"));
    }
    config = (*rec)["config"];  // the stored wait wins
  }
  check_deadline(key);
  json payload;
  {
    auto conn = pool_.acquire();
    pqxx::nontransaction tx(*conn);
    const auto rows = pg::exec(tx, sql::kWait, claimed_.instance_id, claimed_.generation.value(),
                               key, config["type"].get<std::string>(), config["match"].dump(),
                               config.dump(), config["timeout_ms"].get<std::int64_t>());
    if (rows[0][0].as<int>() == 0) refused("wait " + key);
    if (!rows[0][1].is_null()) payload = json::parse(rows[0][1].c_str());
  }
  after_journal_write();
  if (!payload.is_null()) {
    claimed_.steps[key] = json{{"kind", "wait"}, {"state", "succeeded"}, {"output", payload}};
    return payload;
  }
  if (rec && due(*rec)) {
    const std::string message = "wait " + key + " for event '" + config["type"].get<std::string>() +
                                "' matching " + config["match"].dump() + " timed out after " +
                                std::to_string(config["timeout_ms"].get<std::int64_t>()) + " ms";
    record_step(key, "wait", config, "failed", 0, json(),
                {{"message", message}, {"kind", "event_timeout"}}, std::nullopt, "timed out",
                {{"message", message}});
    throw EventTimeout(key, "event_timeout", message);
  }
  throw Suspended{key};
}

RunId Replay::spawn(std::string_view name, ledger::DispatchRequest request) {
  const std::string key = next_key(name);
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

}  // namespace runledger::coordinator
