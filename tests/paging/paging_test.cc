// Cursors and pages without a database: what a cursor carries, and what is refused as one. The
// listings' own paging (ordering, ties, rows inserted between pages) is tested with each module.
#include <catch2/catch.hpp>

#include <vector>

#include "errors/errors.h"
#include "paging/paging.h"

using namespace runledger;
using namespace runledger::paging;

namespace {

bool any_text(std::string_view id) {
  return !id.empty();
}

constexpr Listing kByTime{"things_by_time", true, is_integer_id};
constexpr Listing kByTimeToo{"other_things_by_time", true, is_integer_id};
constexpr Listing kById{"things_by_id", false, is_integer_id};
constexpr Listing kByText{"things_by_text", true, any_text};

}  // namespace

TEST_CASE("a cursor gives back the position it was made from, for its own listing only") {
  const Position last{1'717'171'717'123'456, "42"};
  const std::string cursor = encode_cursor(kByTime, last);
  CHECK(cursor.find_first_not_of(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
        std::string::npos);
  const Position back = decode_cursor(kByTime, cursor);
  CHECK(back.at_us == last.at_us);
  CHECK(back.id == "42");
  CHECK_THROWS_AS(decode_cursor(kByTimeToo, cursor), InvalidArgument);
  CHECK_THROWS_AS(decode_cursor(kById, cursor), InvalidArgument);

  const Position by_id = decode_cursor(kById, encode_cursor(kById, {std::nullopt, "7"}));
  CHECK_FALSE(by_id.at_us.has_value());
  CHECK(by_id.id == "7");

  // Ids with any characters survive (instance ids have '.' and ':').
  CHECK(decode_cursor(kByText, encode_cursor(kByText, {0, "ship:demo.1/\"x\""})).id ==
        "ship:demo.1/\"x\"");
}

TEST_CASE("anything but a cursor of the listing is InvalidArgument") {
  const std::string good = encode_cursor(kByTime, {5, "1"});
  for (const std::string& bad :
       {std::string(""), std::string("not a cursor"), std::string("!!!!"), good + "*",
        good.substr(0, good.size() - 3), std::string(5000, 'A'),
        // Made for the listing but with what its statement could not cast.
        encode_cursor(kByTime, {5, "x"}), encode_cursor(kByTime, {5, "-1"}),
        encode_cursor(kByTime, {5, "01"}), encode_cursor(kByTime, {5, "99999999999999999999"}),
        encode_cursor(kByTime, {-1, "1"}), encode_cursor(kByTime, {253'402'300'800'000'000, "1"}),
        encode_cursor(kByTime, {std::nullopt, "1"})}) {
    INFO(bad);
    CHECK_THROWS_AS(decode_cursor(kByTime, bad), InvalidArgument);
  }
  try {
    decode_cursor(kByTime, "nope");
    FAIL("accepted");
  } catch (const InvalidArgument& e) {
    CHECK(e.details()["field"] == "cursor");
  }
}

TEST_CASE("a limit is 1 to 1000") {
  CHECK_NOTHROW(check_limit(1));
  CHECK_NOTHROW(check_limit(kMaxLimit));
  CHECK_THROWS_AS(check_limit(0), InvalidArgument);
  CHECK_THROWS_AS(check_limit(-5), InvalidArgument);
  CHECK_THROWS_AS(check_limit(kMaxLimit + 1), InvalidArgument);
  CHECK_THROWS_AS(start_after(kByTime, {std::nullopt, 0}), InvalidArgument);
  CHECK_FALSE(start_after(kByTime, {std::nullopt, 10}).has_value());
  CHECK(start_after(kByTime, {encode_cursor(kByTime, {3, "9"}), 10})->id == "9");
}

TEST_CASE("start_parameters gives a cursor's position as statement parameters, none at the start") {
  const auto start = start_parameters(kByTime, {encode_cursor(kByTime, {3, "9"}), 10});
  CHECK(start.at_us == "3");
  CHECK(start.id == "9");
  const auto first = start_parameters(kByTime, {std::nullopt, 10});
  CHECK_FALSE(first.at_us.has_value());
  CHECK_FALSE(first.id.has_value());
  CHECK_THROWS_AS(start_parameters(kByTime, {std::nullopt, 0}), InvalidArgument);
}

TEST_CASE("a page keeps limit rows and names the last one when more follow") {
  const std::vector<int> rows = {10, 9, 8, 7};
  const auto item = [](int row) { return row * 2; };
  const auto position = [](int row) { return Position{row, std::to_string(row)}; };
  const auto full = page_of<int>(rows, kByTime, 3, item, position);
  CHECK(full.items == std::vector<int>{20, 18, 16});
  REQUIRE(full.next_cursor);
  CHECK(decode_cursor(kByTime, *full.next_cursor).id == "8");
  const auto last = page_of<int>(rows, kByTime, 4, item, position);
  CHECK(last.items.size() == 4);
  CHECK_FALSE(last.next_cursor);
}

TEST_CASE("all_pages reads a listing to its end") {
  const std::vector<int> listing = {9, 8, 7, 6, 5, 4, 3};
  int fetches = 0;
  const auto fetch = [&](const PageRequest& request) {
    ++fetches;
    const std::size_t from =
        request.cursor ? std::stoul(decode_cursor(kById, *request.cursor).id) : 0;
    std::vector<std::size_t> rows;
    for (std::size_t i = from; i < listing.size() && rows.size() <= std::size_t(request.limit);
         ++i) {
      rows.push_back(i);
    }
    return page_of<int>(
        rows, kById, request.limit, [&](std::size_t i) { return listing[i]; },
        [](std::size_t i) {
          return Position{std::nullopt, std::to_string(i + 1)};
        });
  };
  CHECK(all_pages(fetch, 3) == listing);
  CHECK(fetches == 3);
}
