#include <cctype>

#include "errors/errors.h"
#include "pg/pg.h"

namespace runledger::pg {
namespace {

bool is_uri(std::string_view url) {
  return url.starts_with("postgresql://") || url.starts_with("postgres://");
}

// ASCII only: std::isalnum would follow the locale, and a byte of UTF-8 is never unreserved.
bool unreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

bool plain_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (!(std::isalnum(c) || c == '_' || c == '.')) return false;
  }
  return true;
}

}  // namespace

std::string percent_encode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    if (unreserved(c)) {
      out += c;
    } else {
      const auto byte = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    }
  }
  return out;
}

std::string with_settings(std::string_view url, const std::vector<Setting>& settings) {
  if (settings.empty()) return std::string(url);
  // libpq's `options` is split on spaces, so names and values are restricted to plain tokens.
  std::string options;
  for (const auto& s : settings) {
    if (!plain_token(s.name) || !plain_token(s.value)) {
      throw InvalidArgument("session setting must be a plain name=value token: " + s.name);
    }
    if (!options.empty()) options += ' ';
    options += "-c " + s.name + "=" + s.value;
  }
  std::string out(url);
  if (is_uri(url)) {
    out += url.find('?') == std::string_view::npos ? '?' : '&';
    out += "options=" + percent_encode(options);
  } else {
    out += " options='" + options + "'";
  }
  return out;
}

std::string duration_setting(std::chrono::milliseconds ms) {
  return std::to_string(ms.count()) + "ms";
}

}  // namespace runledger::pg
