// Keyset paging for the modules' listings (runs, steps, thread messages, ...): a page of items
// and an opaque cursor to the next page.
//
// Contract:
//  - A listing is ordered by a key unique per row: a timestamp and an id (newest first, ties
//    broken by id), or an id alone. A page holds at most `limit` items, 1-1000 (InvalidArgument
//    otherwise), and, when more rows follow it, a next_cursor naming the key of its last row; the
//    next page is the rows after that key. So a row is never repeated or skipped from one page to
//    the next, and rows inserted between two page reads do not shift the pages.
//  - A cursor is opaque text (URL-safe) that only the listing that made it accepts; anything else
//    given as a cursor is InvalidArgument, never a database error.
//  - Each listing is one named statement whose keyset condition an index serves (the module's
//    statements.h and the migration that made the index say which).
//
// Thread-safety: pure functions and values.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace runledger::paging {

inline constexpr int kMaxLimit = 1000;

struct PageRequest {
  std::optional<std::string> cursor;  // the next_cursor of the previous page; none: the first page
  int limit = 100;                    // 1-kMaxLimit
};

template <class T>
struct Page {
  std::vector<T> items;
  std::optional<std::string> next_cursor;  // none: this is the last page
};

// Where a row is in its listing: the values of the listing's ordering key.
struct Position {
  // The row's timestamp in microseconds since the Unix epoch (0 to 9999-12-31); none for listings
  // ordered by id alone.
  std::optional<std::int64_t> at_us;
  std::string id;  // as text
};

// A listing's cursors: its name (a cursor is only valid for the listing that made it), whether
// its order starts with a timestamp, and which ids it has (a cursor's id reaches SQL, so it must
// be one the listing's statement can cast).
struct Listing {
  std::string_view name;
  bool ordered_by_time;
  bool (*valid_id)(std::string_view id);
};

// True for a decimal integer id in 0..2^63-1 (a bigint or bigserial).
bool is_integer_id(std::string_view id);

std::string encode_cursor(const Listing& listing, const Position& last);
// The position a cursor of `listing` names; InvalidArgument for anything encode_cursor did not
// make for this listing.
Position decode_cursor(const Listing& listing, std::string_view cursor);

// InvalidArgument unless 1 <= limit <= kMaxLimit.
void check_limit(int limit);

// Where the page `request` asks for starts: after the position its cursor names, or at the
// listing's start (none). Checks the limit and the cursor (InvalidArgument).
std::optional<Position> start_after(const Listing& listing, const PageRequest& request);

// The same position as a listing statement's text parameters: the time in microseconds and the
// id, both none (NULL) at the listing's start.
struct StartParameters {
  std::optional<std::string> at_us;
  std::optional<std::string> id;
};
StartParameters start_parameters(const Listing& listing, const PageRequest& request);

// The page made of a listing statement's rows, which were fetched with LIMIT limit + 1: the row
// past the page's end says that another page follows, and the cursor names the last row kept.
template <class T, class Rows, class ToItem, class ToPosition>
Page<T> page_of(const Rows& rows, const Listing& listing, int limit, ToItem to_item,
                ToPosition to_position) {
  Page<T> page;
  const std::size_t kept = std::min<std::size_t>(rows.size(), static_cast<std::size_t>(limit));
  for (std::size_t i = 0; i < kept; ++i) page.items.push_back(to_item(rows[i]));
  if (rows.size() > kept) page.next_cursor = encode_cursor(listing, to_position(rows[kept - 1]));
  return page;
}

// Every item of a listing, page after page: `fetch(request)` returns one page. For callers that
// need a whole listing they know to be small (the CLI, the demo, tests).
template <class Fetch>
auto all_pages(Fetch fetch, int limit = kMaxLimit) {
  PageRequest request{std::nullopt, limit};
  auto page = fetch(request);
  auto items = std::move(page.items);
  while (page.next_cursor) {
    request.cursor = std::move(page.next_cursor);
    page = fetch(request);
    items.insert(items.end(), std::make_move_iterator(page.items.begin()),
                 std::make_move_iterator(page.items.end()));
  }
  return items;
}

}  // namespace runledger::paging
