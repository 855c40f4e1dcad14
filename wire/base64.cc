// Encoding is OpenSSL's EVP_EncodeBlock. Decoding is our own: EVP_DecodeBlock skips whitespace,
// does not say how much of its output was padding, and accepts nonzero bits after the last byte.
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "wire/wire.h"

namespace runledger::wire {
namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr std::string_view kExpected = "standard base64 (RFC 4648, padded with '=', no whitespace)";

// Each byte's value in the alphabet, or -1.
constexpr std::array<std::int8_t, 256> kSextets = [] {
  std::array<std::int8_t, 256> table{};
  table.fill(-1);
  for (std::size_t i = 0; i < kAlphabet.size(); ++i) {
    table[static_cast<unsigned char>(kAlphabet[i])] = static_cast<std::int8_t>(i);
  }
  return table;
}();

}  // namespace

std::string base64_decode(std::string_view text, std::string_view field) {
  if (text.size() % 4 != 0) refuse(field, kExpected);
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int padding = 0;
    std::uint32_t bits = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      const int sextet = kSextets[static_cast<unsigned char>(c)];
      if (c == '=' && last && k >= 2) {
        ++padding;
      } else if (sextet < 0 || padding > 0) {
        refuse(field, kExpected);
      }
      bits = (bits << 6) | static_cast<std::uint32_t>(std::max(sextet, 0));
    }
    // The bits a padded group carries past its last byte must be zero.
    if ((padding == 1 && (bits & 0xff) != 0) || (padding == 2 && (bits & 0xffff) != 0)) {
      refuse(field, kExpected);
    }
    out.push_back(static_cast<char>(bits >> 16));
    if (padding < 2) out.push_back(static_cast<char>((bits >> 8) & 0xff));
    if (padding < 1) out.push_back(static_cast<char>(bits & 0xff));
  }
  return out;
}

std::string base64_encode(std::string_view bytes) {
  // EVP_EncodeBlock takes an int length: encode in chunks of whole 3-byte groups.
  constexpr std::size_t kChunk = 3 << 20;
  std::string out((bytes.size() + 2) / 3 * 4, '\0');
  std::size_t written = 0;
  for (std::size_t at = 0; at < bytes.size(); at += kChunk) {
    const std::size_t n = std::min(kChunk, bytes.size() - at);
    // Writes a NUL after the text: the last chunk's lands on out's own terminator.
    written += static_cast<std::size_t>(EVP_EncodeBlock(
        reinterpret_cast<unsigned char*>(out.data() + written),
        reinterpret_cast<const unsigned char*>(bytes.data() + at), static_cast<int>(n)));
  }
  return out;
}

}  // namespace runledger::wire
