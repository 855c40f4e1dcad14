#include <catch2/catch.hpp>

#include "errors/errors.h"
#include "pg/pg.h"

using namespace runledger;

TEST_CASE("with_settings adds libpq options to a URI, percent-encoded") {
  CHECK(pg::with_settings("postgresql://u:p@127.0.0.1:5/db", {{"lock_timeout", "5s"}}) ==
        "postgresql://u:p@127.0.0.1:5/db?options=-c%20lock_timeout%3D5s");
  CHECK(pg::with_settings("postgresql://h/db?sslmode=disable", {{"a", "1"}, {"b", "2"}}) ==
        "postgresql://h/db?sslmode=disable&options=-c%20a%3D1%20-c%20b%3D2");
}

TEST_CASE("with_settings adds options to a key=value connection string") {
  CHECK(pg::with_settings("host=h dbname=d", {{"lock_timeout", "5s"}}) ==
        "host=h dbname=d options='-c lock_timeout=5s'");
  CHECK(pg::with_settings("host=h", {}) == "host=h");
}

TEST_CASE("with_settings refuses values that could break out of the options string") {
  CHECK_THROWS_AS(pg::with_settings("host=h", {{"lock_timeout", "5s -c x=y"}}), InvalidArgument);
  CHECK_THROWS_AS(pg::with_settings("host=h", {{"a'b", "1"}}), InvalidArgument);
}

TEST_CASE("percent_encode keeps unreserved characters and encodes every other byte") {
  CHECK(pg::percent_encode("") == "");
  CHECK(pg::percent_encode("AZaz09-._~") == "AZaz09-._~");
  // RFC 3986's reserved characters, the space and the percent sign itself.
  CHECK(pg::percent_encode(":/?#[]@!$&'()*+,;= %") ==
        "%3A%2F%3F%23%5B%5D%40%21%24%26%27%28%29%2A%2B%2C%3B%3D%20%25");
  // UTF-8 byte by byte, and bytes that are no text at all.
  CHECK(pg::percent_encode("h\xC3\xA9 \xE6\x97\xA5") == "h%C3%A9%20%E6%97%A5");
  CHECK(pg::percent_encode(std::string_view("a\0b\xFF", 4)) == "a%00b%FF");
}
