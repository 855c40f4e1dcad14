#include "timestamps/timestamps.h"

#include <catch2/catch.hpp>

#include "errors/errors.h"

using runledger::timestamps::rfc3339;

TEST_CASE("rfc3339 prints a UTC timestamptz with milliseconds, cut not rounded") {
  CHECK(rfc3339("2026-12-01 08:43:24.731999+00") == "2026-12-01T08:43:24.731Z");
  CHECK(rfc3339("2026-12-01 08:43:24+00") == "2026-12-01T08:43:24.000Z");
  CHECK(rfc3339("2026-12-01 08:43:24.7+00") == "2026-12-01T08:43:24.700Z");
}

TEST_CASE("rfc3339 converts other session time zones to UTC, across a day and a year") {
  CHECK(rfc3339("2027-01-01 01:30:00.5+05:30") == "2026-12-31T20:00:00.500Z");
  CHECK(rfc3339("2026-02-28 23:00:00-02") == "2026-03-01T01:00:00.000Z");
  CHECK(rfc3339("2024-02-28 23:00:00-02") == "2024-02-29T01:00:00.000Z");
}

TEST_CASE("rfc3339 refuses what is not a timestamptz") {
  for (const char* bad : {"", "2026-12-01", "2026-13-01 00:00:00+00", "2026-12-01 00:00:00",
                          "2026-12-01 00:00:00.1234567+00", "2026-12-01 00:00:00+00 x", "now"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(rfc3339(bad), runledger::InvalidArgument);
  }
}
