// The HTTP API's reading of a request body: wire::parse_json, then a route-like read of the
// result through wire::Object, shaped as POST /v1/runs (dispatch a run). Refusing the input with
// a runledger::Error is the expected outcome; anything else (a crash, a sanitizer report, another
// exception escaping) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "errors/errors.h"
#include "wire/wire.h"

namespace {

void read_dispatch(std::string_view text) {
  const nlohmann::json json = runledger::wire::parse_json(text);
  runledger::wire::Object body(json);
  body.string("dispatch_key");
  body.string("thread_key");
  body.string("requester");
  if (auto profile = body.optional_object("profile")) {
    profile->optional_string("model");
    profile->optional_any("script");
    if (auto tools = profile->optional_array("tools")) {
      for (const runledger::wire::Value& tool : *tools) tool.string();
    }
  }
  if (auto budget = body.optional_object("budget")) {
    budget->int64("wall_s", 1, 7 * 86'400);
    budget->int64("max_steps", 1, 100'000);
  }
  const auto prompt = body.optional_string("system_prompt");
  const auto prompt_bytes = body.optional_base64("system_prompt_base64");
  if (prompt && prompt_bytes) {
    runledger::wire::refuse(body.name_of("system_prompt_base64"), "no system_prompt beside it");
  }
  body.optional_any("input");
  body.optional_uuid("parent_run_id");
  body.optional_boolean("wait");
  body.finish();
  // What the service does next with what it read: copy it, store it, echo it. A copy of a deep
  // value recurses; dump() throws on invalid UTF-8.
  const nlohmann::json copy = json;
  (void)copy.dump();
  (void)runledger::wire::base64_encode(prompt_bytes.value_or(""));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    read_dispatch(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const runledger::Error&) {
  }
  return 0;
}
