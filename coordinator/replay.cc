// One execution of a workflow against its record: the record, memoized run steps and their
// retries, and spawns, each new fact written in one statement (sleeps and waits: waits.cc; the
// Scope and the branches of all(): scope.cc).
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

std::pair<std::string, RecordedStep> recorded_step_from_json(const json& j) {
  const auto text = [&](const char* field) { return j.value(field, std::string()); };
  const json& due = j["due_in_ms"];
  return {j["step_key"].get<std::string>(),
          RecordedStep{
              .kind = parse_step_kind(text("kind")),
              .state = parse_step_state(text("state")),
              .attempts = j.value("attempts", 0),
              .config = j["config"],
              .output = j["output"],
              .error = j["error"],
              .due_in_ms = due.is_null() ? std::nullopt : std::optional(due.get<std::int64_t>())}};
}

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
    if (rec.kind == StepKind::run && rec.state == StepState::succeeded && rec.config.is_object() &&
        rec.config.contains("compensation")) {
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
    fail_fatal(key, StepErrorKind::step_limit,
               "step " + key + " is over the limit of " + std::to_string(options_.max_steps) +
                   " steps per execution");
  }
}

const RecordedStep* Replay::record(const std::string& key, StepKind kind) {
  const RecordedStep* rec = nullptr;
  {
    std::lock_guard lock(mu_);
    const auto it = claimed_.steps.find(key);
    if (it == claimed_.steps.end()) return nullptr;
    rec = &it->second;
  }
  if (rec->kind != kind) {
    const std::string message = "non-determinism at step " + key + ": the record holds a " +
                                std::string(to_string(rec->kind)) +
                                " step, this execution called " + std::string(to_string(kind));
    {
      std::lock_guard lock(mu_);
      if (!fatal_) fatal_ = json{{"message", message}, {"step", key}, {"kind", "non_determinism"}};
    }
    throw NonDeterminism(key, message);
  }
  return rec;
}

void Replay::remember(const std::string& key, RecordedStep step) {
  std::lock_guard lock(mu_);
  claimed_.steps[key] = std::move(step);
}

bool Replay::due(const RecordedStep& step) const {
  return !step.due_in_ms || *step.due_in_ms <= elapsed().count();
}

void Replay::check_deadline(const std::string& key) {
  if (claimed_.deadline_in_ms > elapsed().count()) return;
  fail_fatal(key, StepErrorKind::deadline,
             "instance " + claimed_.instance_id.value() +
                 " exceeded the maximum duration of workflow " + claimed_.workflow + " in step " +
                 key);
}

void Replay::fail_fatal(const std::string& key, StepErrorKind kind, const std::string& message) {
  {
    std::lock_guard lock(mu_);
    if (!fatal_) fatal_ = json{{"message", message}, {"step", key}, {"kind", to_string(kind)}};
  }
  throw StepError(key, kind, message);
}

void Replay::refused(const std::string& what) {
  fenced_ = true;
  auto conn = pool_.acquire();
  pqxx::nontransaction tx(*conn);
  const auto rows = pg::exec(tx, sql::kGeneration, claimed_.instance_id.value());
  const std::string now_at = rows.empty() ? "gone" : rows[0][0].as<std::string>();
  throw FencedError(
      what + " refused: instance " + claimed_.instance_id.value() +
          " is no longer held at generation " + std::to_string(claimed_.generation.value()) +
          " (now " + now_at + ")",
      {{"instance_id", claimed_.instance_id.value()}, {"generation", claimed_.generation.value()}});
}

bool Replay::record_step(const std::string& key, StepKind kind, const json& config, StepState state,
                         int attempts, const json& output, const json& error,
                         std::optional<std::int64_t> due_in_ms, std::string_view what,
                         const json& detail) {
  const std::optional<bool> due = recorder_.record(
      StepRow{claimed_.instance_id.value(), claimed_.generation, key, kind, config, state, attempts,
              output, error, due_in_ms, std::string(what), detail});
  if (!due) refused("recording step " + key);
  after_journal_write();
  // Its due time has passed (or it has none) when *due; else it is not consulted again in this
  // execution, which suspends.
  remember(key, RecordedStep{.kind = kind,
                             .state = state,
                             .attempts = attempts,
                             .config = config,
                             .output = output,
                             .error = error,
                             .due_in_ms = std::nullopt});
  return *due;
}

json Replay::run(const std::string& key, const StepConfig& given,
                 const std::function<json(std::stop_token)>& body) {
  validate(given, key);
  StepConfig config = given;
  int attempts = 0;
  if (const RecordedStep* rec = record(key, StepKind::run)) {
    if (rec->state == StepState::succeeded) return rec->output;
    if (rec->state == StepState::failed) {
      throw StepError(key, parse_step_error_kind(rec->error.value("kind", "failed")),
                      rec->error.value("message", "step " + key + " failed"));
    }
    config = config_from_json(rec->config);  // the stored config wins
    attempts = rec->attempts;
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
        record_step(key, StepKind::run, config_json, StepState::succeeded, attempt, *outcome.value,
                    json(), std::nullopt, "step succeeded", {{"attempt", attempt}});
        return *outcome.value;
      }
      outcome.kind = StepErrorKind::value_too_large;
      outcome.failure = "step " + key + " returned " + std::to_string(size) +
                        " bytes of JSON, over the limit of " +
                        std::to_string(options_.max_value_bytes);
    }
    const bool final = outcome.kind == StepErrorKind::non_retryable ||
                       outcome.kind == StepErrorKind::value_too_large || attempt > config.retries;
    const json error = {{"message", outcome.failure}, {"kind", to_string(outcome.kind)}};
    if (final) {
      record_step(key, StepKind::run, config_json, StepState::failed, attempt, json(), error,
                  std::nullopt, "step failed", {{"attempt", attempt}, {"error", error}});
      throw StepError(key, outcome.kind, outcome.failure);
    }
    const std::int64_t delay = retry_delay_ms(config, attempt);
    const bool retry_now = record_step(
        key, StepKind::run, config_json, StepState::pending, attempt, json(), error, delay,
        "attempt failed", {{"attempt", attempt}, {"error", error}, {"retry_in_ms", delay}});
    if (!retry_now) throw Suspended{{key}};
    attempts = attempt;
  }
}

RunId Replay::spawn(const std::string& key, ledger::DispatchRequest request) {
  if (const RecordedStep* rec = record(key, StepKind::spawn)) {
    if (rec->state == StepState::succeeded) {
      return RunId(rec->output["run_id"].get<std::string>());
    }
    if (rec->state == StepState::failed) {
      throw StepError(key, StepErrorKind::failed,
                      rec->error.value("message", "spawn " + key + " failed"));
    }
  }
  check_deadline(key);
  request.dispatch_key = child_dispatch_key(claimed_.instance_id.value(), key, claimed_.restarts);
  request.parent_instance = claimed_.instance_id.value();
  const json config = {{"dispatch_key", request.dispatch_key},
                       {"thread_key", request.thread_key},
                       {"requester", request.requester}};
  std::optional<ledger::Dispatched> dispatched;
  try {
    dispatched.emplace(ledger_.dispatch(request));
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unavailable) throw;
    const json error = {{"message", std::string("spawn ") + key + ": " + e.what()},
                        {"kind", to_string(StepErrorKind::failed)}};
    record_step(key, StepKind::spawn, config, StepState::failed, 1, json(), error, std::nullopt,
                "step failed", {{"error", error}});
    throw StepError(key, StepErrorKind::failed, error["message"]);
  }
  const json output = {{"run_id", dispatched->run.run_id.value()},
                       {"created", dispatched->created}};
  record_step(key, StepKind::spawn, config, StepState::succeeded, 1, output, json(), std::nullopt,
              "spawned", output);
  return dispatched->run.run_id;
}

}  // namespace runledger::coordinator
