// Timestamps as the API and the CLI print them: RFC 3339 in UTC with milliseconds
// ("2026-12-01T08:43:24.731Z"), converted from the text PostgreSQL gives a timestamptz.
//
// Contract: rfc3339() accepts what PostgreSQL prints for a timestamptz in any session time zone
// ("2026-12-01 08:43:24.731234+00", "+05:30", no fraction, 1-6 fraction digits) and returns the
// same instant in UTC, the fraction cut (not rounded) to milliseconds, so that two instants keep
// their order. Anything else is InvalidArgument. Values, not clocks: nothing here reads the time.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace runledger::timestamps {

std::string rfc3339(std::string_view postgres_timestamptz);
// rfc3339() of a value that may be absent (a NULL column).
std::optional<std::string> optional_rfc3339(const std::optional<std::string>& postgres_timestamptz);

}  // namespace runledger::timestamps
