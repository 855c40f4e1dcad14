#include "ids/ids.h"

#include <openssl/rand.h>

#include <cctype>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "errors/errors.h"

namespace runledger {

bool is_uuid(std::string_view text) {
  if (text.size() != 36) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? text[i] != '-' : !std::isxdigit(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

std::string canonical_uuid(std::string_view text, std::string_view what) {
  if (!is_uuid(text)) {
    throw InvalidArgument(std::string(what) + " must be a UUID (8-4-4-4-12 hexadecimal digits)");
  }
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string random_uuid() {
  unsigned char b[16];
  if (RAND_bytes(b, sizeof b) != 1) throw std::runtime_error("RAND_bytes failed");
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  char out[37];
  std::snprintf(out, sizeof out,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return out;
}

namespace {

constexpr std::size_t kMaxKeyBytes = 255;

// Length of the UTF-8 sequence starting at s[i], or 0 if it is not valid UTF-8.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  std::size_t n;
  unsigned int code;
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0) {
    n = 2;
    code = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3;
    code = c & 0x0f;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4;
    code = c & 0x07;
  } else
    return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3f);
  }
  static constexpr unsigned int kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < kMinForLength[n] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return n;
}

}  // namespace

void check_key(std::string_view value, std::string_view what) {
  const std::string name(what);
  if (value.empty()) throw InvalidArgument(name + " must not be empty", {{"field", name}});
  if (value.size() > kMaxKeyBytes) {
    throw InvalidArgument(name + " is longer than 255 bytes", {{"field", name}});
  }
  for (std::size_t i = 0; i < value.size();) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c == 0x7f) {
      throw InvalidArgument(name + " contains a control character", {{"field", name}});
    }
    const std::size_t n = utf8_sequence(value, i);
    if (n == 0) throw InvalidArgument(name + " is not valid UTF-8", {{"field", name}});
    i += n;
  }
}

InstanceId InstanceId::parse(std::string_view text, std::string_view what) {
  check_instance_id(text, what);
  return InstanceId(std::string(text));
}

void check_instance_id(std::string_view value, std::string_view what) {
  const std::string name(what);
  if (value.empty() || value.size() > kMaxKeyBytes) {
    throw InvalidArgument(name + " must be 1-255 characters", {{"field", name}});
  }
  for (unsigned char c : value) {
    if (!(std::isalnum(c) || c == '_' || c == '.' || c == ':' || c == '-')) {
      throw InvalidArgument(name + " may contain only A-Z a-z 0-9 _ . : -", {{"field", name}});
    }
  }
}

}  // namespace runledger
