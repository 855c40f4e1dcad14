// One attempt of a step body or compensation handler, and the retry arithmetic around it.
// Private to coordinator/.
#pragma once

#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include "coordinator/coordinator.h"

namespace runledger::coordinator {

json config_to_json(const StepConfig& config);
StepConfig config_from_json(const json& j);
// InvalidArgument for negative retries or delay, or a timeout that is not positive.
void validate(const StepConfig& config, std::string_view name);
// Delay before retry number `retry` (1-based).
std::int64_t retry_delay_ms(const StepConfig& config, int retry);

struct BodyOutcome {
  std::optional<json> value;
  std::string failure;                         // when !value
  StepErrorKind kind = StepErrorKind::failed;  // when !value: failed | non_retryable | timeout
};

// Runs the body on this thread; a watchdog triggers its stop token at the timeout, and a value
// returned after it is discarded (a C++ function cannot be preempted).
BodyOutcome run_body(const StepConfig& config, const std::function<json(std::stop_token)>& body,
                     int attempt);

}  // namespace runledger::coordinator
