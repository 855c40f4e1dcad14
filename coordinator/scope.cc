// The Step a workflow sees (Scope): step names, and the branches of all() on their own threads.
#include <thread>

#include "coordinator/replay.h"
#include "errors/errors.h"

namespace runledger::coordinator {

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
    return replay_.wait(key, StepKind::wait,
                        json::array({{{"type", wait.type}, {"match", wait.match}}}),
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
    const json taken = replay_.wait(key, StepKind::wait_any, alternatives, timeout.count());
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
