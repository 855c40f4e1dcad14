// One attempt of a step body or compensation handler, and the retry arithmetic around it.
#include "coordinator/attempt.h"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "errors/errors.h"

namespace runledger::coordinator {
namespace {

constexpr std::string_view kBackoffNames[] = {"constant", "linear", "exponential"};

}  // namespace

json config_to_json(const StepConfig& c) {
  json j = {{"retries", c.retries},
            {"delay_ms", c.delay.count()},
            {"backoff", kBackoffNames[static_cast<int>(c.backoff)]}};
  j["timeout_ms"] = c.timeout ? json(c.timeout->count()) : json();
  if (c.compensation) j["compensation"] = *c.compensation;
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
  if (j.contains("compensation")) c.compensation = j["compensation"].get<std::string>();
  return c;
}

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
    out.kind = StepErrorKind::non_retryable;
  } catch (const std::exception& e) {
    out.failure = e.what();
    out.kind = StepErrorKind::failed;
  }
  finish();
  if (config.timeout &&
      (stop.stop_requested() || std::chrono::steady_clock::now() - started > *config.timeout)) {
    out.value.reset();
    out.failure = "attempt " + std::to_string(attempt) + " timed out after " +
                  std::to_string(config.timeout->count()) + " ms";
    out.kind = StepErrorKind::timeout;
  }
  return out;
}

}  // namespace runledger::coordinator
