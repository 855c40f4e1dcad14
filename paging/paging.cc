#include "paging/paging.h"

#include <charconv>

#include <nlohmann/json.hpp>

#include "digest/digest.h"
#include "errors/errors.h"

namespace runledger::paging {
namespace {

// 9999-12-31 23:59:59.999999 UTC: the statements turn a cursor's time back into a timestamptz,
// which must not overflow.
constexpr std::int64_t kLatestMicros = 253'402'300'799'999'999;

// Far more than any cursor encode_cursor makes; a longer one is not worth decoding.
constexpr std::size_t kLongestCursor = 4096;

[[noreturn]] void refuse(const Listing& listing) {
  throw InvalidArgument("cursor is not one of this listing (" + std::string(listing.name) +
                            "): pass back a next_cursor it returned",
                        {{"field", "cursor"}});
}

}  // namespace

bool is_integer_id(std::string_view id) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), value);
  return !id.empty() && ec == std::errc() && end == id.data() + id.size() && value >= 0 &&
         id[0] != '-' && (id.size() == 1 || id[0] != '0');
}

std::string encode_cursor(const Listing& listing, const Position& last) {
  nlohmann::json key = nlohmann::json::array({std::string(listing.name)});
  if (last.at_us) key.push_back(*last.at_us);
  key.push_back(last.id);
  // base64url: cursors travel in URLs.
  return digest::base64url(key.dump());
}

Position decode_cursor(const Listing& listing, std::string_view cursor) {
  if (cursor.size() > kLongestCursor) refuse(listing);
  const auto text = digest::from_base64url(cursor);
  if (!text) refuse(listing);
  const auto key = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  const std::size_t size = listing.ordered_by_time ? 3 : 2;
  if (!key.is_array() || key.size() != size || !key[0].is_string() ||
      key[0].get_ref<const std::string&>() != listing.name || !key[size - 1].is_string() ||
      !listing.valid_id(key[size - 1].get_ref<const std::string&>())) {
    refuse(listing);
  }
  Position out{std::nullopt, key[size - 1].get<std::string>()};
  if (listing.ordered_by_time) {
    if (!key[1].is_number_integer()) refuse(listing);
    const auto at = key[1].get<std::int64_t>();
    if (at < 0 || at > kLatestMicros) refuse(listing);
    out.at_us = at;
  }
  return out;
}

void check_limit(int limit) {
  if (limit < 1 || limit > kMaxLimit) {
    throw InvalidArgument("limit must be between 1 and " + std::to_string(kMaxLimit),
                          {{"field", "limit"}});
  }
}

std::optional<Position> start_after(const Listing& listing, const PageRequest& request) {
  check_limit(request.limit);
  if (!request.cursor) return std::nullopt;
  return decode_cursor(listing, *request.cursor);
}

StartParameters start_parameters(const Listing& listing, const PageRequest& request) {
  const auto after = start_after(listing, request);
  if (!after) return {};
  StartParameters out;
  if (after->at_us) out.at_us = std::to_string(*after->at_us);
  out.id = after->id;
  return out;
}

}  // namespace runledger::paging
