#include "timestamps/timestamps.h"

#include <charconv>
#include <cstdint>
#include <cstdio>

#include "errors/errors.h"

namespace runledger::timestamps {
namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

struct Civil {
  std::int64_t y;
  unsigned m, d;
};

Civil civil_from_days(std::int64_t z) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  return {static_cast<std::int64_t>(yoe) + era * 400 + (m <= 2), m, d};
}

[[noreturn]] void refuse(std::string_view text) {
  throw InvalidArgument("not a PostgreSQL timestamptz: '" + std::string(text.substr(0, 40)) + "'");
}

class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}
  // Exactly `digits` decimal digits.
  int number(int digits) {
    if (text_.size() - at_ < static_cast<std::size_t>(digits)) refuse(text_);
    int value = 0;
    const auto [end, error] =
        std::from_chars(text_.data() + at_, text_.data() + at_ + digits, value);
    if (error != std::errc() || end != text_.data() + at_ + digits) refuse(text_);
    at_ += static_cast<std::size_t>(digits);
    return value;
  }
  void expect(char c) {
    if (!take(c)) refuse(text_);
  }
  bool take(char c) {
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  bool digit_next() const { return at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9'; }
  bool done() const { return at_ == text_.size(); }

 private:
  std::string_view text_;
  std::size_t at_ = 0;
};

}  // namespace

std::string rfc3339(std::string_view text) {
  Reader in(text);
  const int year = in.number(4);
  in.expect('-');
  const int month = in.number(2);
  in.expect('-');
  const int day = in.number(2);
  if (!in.take(' ')) in.expect('T');
  const int hour = in.number(2);
  in.expect(':');
  const int minute = in.number(2);
  in.expect(':');
  const int second = in.number(2);
  int millis = 0;
  if (in.take('.')) {
    int digits = 0;
    while (in.digit_next()) {
      const int d = in.number(1);
      if (digits < 3) millis = millis * 10 + d;
      ++digits;
    }
    if (digits == 0 || digits > 6) refuse(text);
    for (int i = digits; i < 3; ++i) millis *= 10;
  }
  int offset_s = 0;
  if (!in.take('Z')) {
    int sign = 1;
    if (in.take('-')) {
      sign = -1;
    } else {
      in.expect('+');
    }
    int off = in.number(2) * 3600;
    if (in.take(':')) {
      off += in.number(2) * 60;
      if (in.take(':')) off += in.number(2);
    }
    offset_s = sign * off;
  }
  if (!in.done() || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 ||
      second > 60) {
    refuse(text);
  }
  const std::int64_t local =
      days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day)) * 86400 +
      hour * 3600 + minute * 60 + second;
  const std::int64_t utc = local - offset_s;
  const std::int64_t days = utc >= 0 ? utc / 86400 : (utc - 86399) / 86400;
  const std::int64_t in_day = utc - days * 86400;
  const Civil c = civil_from_days(days);
  char out[64];  // room for any int64 year: the compiler checks
  std::snprintf(out, sizeof out, "%04lld-%02u-%02uT%02lld:%02lld:%02lld.%03dZ",
                static_cast<long long>(c.y), c.m, c.d, static_cast<long long>(in_day / 3600),
                static_cast<long long>(in_day / 60 % 60), static_cast<long long>(in_day % 60),
                millis);
  return out;
}

std::optional<std::string> optional_rfc3339(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  return rfc3339(*text);
}

}  // namespace runledger::timestamps
