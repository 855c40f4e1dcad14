#include "cli/workflows.h"

#include <chrono>
#include <memory>

namespace runledger::cli {
namespace {

using coordinator::json;
using namespace std::chrono_literals;

// A demonstration of a step, a sleep and an event wait: `runledger instances create --workflow
// demo.approval --id d1 --input '{"name": "ada"}'`, then `runledger instances send-event d1
// --type approval --payload '{"by": "bob"}'`.
class DemoApproval final : public coordinator::Workflow {
 public:
  json run(const json& input, coordinator::Step& step) override {
    const json greeted = step.run("greet", [&input](std::stop_token) -> json {
      if (!input.is_object() || !input.contains("name") || !input["name"].is_string()) {
        throw coordinator::NonRetryable(R"(demo.approval needs an input {"name": "<text>"})");
      }
      return {{"greeting", "hello " + input["name"].get<std::string>()}};
    });
    step.sleep("pause", 1s);
    coordinator::EventWait approval;
    approval.type = "approval";
    approval.match = json::object();
    approval.timeout = 10min;
    const json payload = step.wait_for_event("approval", approval);
    return {
        {"greeting", greeted.at("greeting")},
        {"approved_by", payload.is_object() && payload.contains("by") ? payload["by"] : json()}};
  }
};

}  // namespace

coordinator::Registry builtin_workflows(std::shared_ptr<coordinator::Workflow> ship) {
  coordinator::Registry registry;
  coordinator::Registration demo;
  demo.name = "demo.approval";
  demo.version = 1;
  demo.max_duration = 1h;
  demo.workflow = std::make_shared<DemoApproval>();
  registry.add(std::move(demo));
  coordinator::Registration pipeline;
  pipeline.name = "ship";
  pipeline.version = 1;
  pipeline.max_duration = std::chrono::hours(14 * 24);
  pipeline.workflow = std::move(ship);
  registry.add(std::move(pipeline));
  return registry;
}

}  // namespace runledger::cli
