// The registry: workflows by name and version, compensation handlers by name.
#include "coordinator/coordinator.h"
#include "errors/errors.h"

namespace runledger::coordinator {

void Registry::add(Registration registration) {
  if (registration.name.empty()) throw InvalidArgument("a workflow registration needs a name");
  if (registration.max_duration.count() <= 0) {
    throw InvalidArgument("workflow " + registration.name + ": max_duration must be positive");
  }
  const std::string name = registration.name;
  if (!workflows_.emplace(name, std::move(registration)).second) {
    throw InvalidArgument("workflow " + name + " is registered twice");
  }
}

void Registry::add_compensation(Compensation compensation) {
  if (compensation.name.empty()) throw InvalidArgument("a compensation needs a name");
  if (!compensation.undo) {
    throw InvalidArgument("compensation " + compensation.name + " has no undo function");
  }
  const std::string name = compensation.name;
  if (!compensations_.emplace(name, std::move(compensation)).second) {
    throw InvalidArgument("compensation " + name + " is registered twice");
  }
}

const Compensation* Registry::find_compensation(std::string_view name) const {
  const auto it = compensations_.find(name);
  return it == compensations_.end() ? nullptr : &it->second;
}

const Registration* Registry::find(std::string_view name) const {
  const auto it = workflows_.find(name);
  return it == workflows_.end() ? nullptr : &it->second;
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, r] : workflows_) out.push_back(name);
  return out;
}

std::vector<std::string> Registry::runnable_names() const {
  std::vector<std::string> out;
  for (const auto& [name, r] : workflows_) {
    if (r.workflow) out.push_back(name);
  }
  return out;
}

}  // namespace runledger::coordinator
