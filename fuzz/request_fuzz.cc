// Fuzz target: the server's request parsing and validation entry point, server::check_request
// (routing, the target's percent escapes and query, content types, body limits, strict JSON and
// every route's fields), without any I/O or database. The input is a request in a plain form:
// "METHOD TARGET CONTENT-TYPE\n" then the body. Anything but a runledger::Error escaping, a
// crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "errors/errors.h"
#include "server/server.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t line_end = input.find('\n');
  if (line_end == std::string_view::npos) return 0;
  const std::string_view line = input.substr(0, line_end);
  const std::size_t a = line.find(' ');
  const std::size_t b = a == std::string_view::npos ? a : line.find(' ', a + 1);
  if (b == std::string_view::npos) return 0;
  try {
    runledger::server::check_request(line.substr(0, a), line.substr(a + 1, b - a - 1),
                                     line.substr(b + 1), input.substr(line_end + 1));
  } catch (const runledger::Error&) {
    // Refused with a typed outcome: what the server answers such a request with.
  }
  return 0;
}
