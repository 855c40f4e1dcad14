// Reading a paged listing (paging/paging.h) page by page in tests, checking each page's shape.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <pqxx/pqxx>

#include "paging/paging.h"

namespace runledger::testing {

// The pages of a listing from `request` to its end: `fetch(request)` returns one page. Checks that
// no page holds more than the limit, that every page but the last is full and has a cursor, and
// that the last has none.
template <class Fetch>
auto read_pages(Fetch fetch, paging::PageRequest request) {
  std::vector<decltype(fetch(request).items)> pages;
  for (;;) {
    auto page = fetch(request);
    CHECK(page.items.size() <= static_cast<std::size_t>(request.limit));
    pages.push_back(std::move(page.items));
    if (!page.next_cursor) return pages;
    CHECK(pages.back().size() == static_cast<std::size_t>(request.limit));
    request.cursor = std::move(page.next_cursor);
  }
}

// The items of `pages`, in order, mapped by `key` (e.g. to their ids).
template <class Pages, class Key>
auto keys_of(const Pages& pages, Key key) {
  std::vector<decltype(key(pages.front().front()))> out;
  for (const auto& page : pages) {
    for (const auto& item : page) out.push_back(key(item));
  }
  return out;
}

// EXPLAIN of `sql` run with `parameters` (SQL literals, comma-separated), one line per plan
// node: the generic plan, which a prepared statement may switch to after five executions and
// which must serve every cursor, or the custom plan of these parameters.
inline std::string plan_of(const std::string& url, const std::string& sql,
                           const std::string& parameters, bool generic) {
  pqxx::connection conn(url);
  pqxx::nontransaction tx(conn);
  tx.exec(std::string("SET plan_cache_mode = ") +
          (generic ? "force_generic_plan" : "force_custom_plan"));
  tx.exec("PREPARE listing AS " + sql);
  std::string plan;
  for (const auto& row : tx.exec("EXPLAIN EXECUTE listing(" + parameters + ")")) {
    plan += row[0].as<std::string>() + "\n";
  }
  return plan;
}

}  // namespace runledger::testing
