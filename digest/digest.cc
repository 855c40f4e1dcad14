#include "digest/digest.h"

#include <openssl/evp.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace runledger::digest {

struct Sha256::Context {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Context() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) {
  if (ctx_->md == nullptr || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("EVP SHA-256 initialisation failed");
  }
}

Sha256::~Sha256() = default;

Sha256& Sha256::update(std::string_view bytes) {
  if (EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size()) != 1) {
    throw std::runtime_error("EVP SHA-256 update failed");
  }
  return *this;
}

Sha256Digest Sha256::finish() {
  Sha256Digest out{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx_->md, out.data(), &length) != 1 || length != out.size()) {
    throw std::runtime_error("EVP SHA-256 finish failed");
  }
  return out;
}

Sha256Digest sha256(std::string_view bytes) {
  return Sha256().update(bytes).finish();
}

std::string hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string hex(const Sha256Digest& digest) {
  return hex(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

namespace {
constexpr char kBase64urlAlphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
}  // namespace

std::string base64url(std::string_view bytes) {
  std::string out;
  std::uint32_t bits = 0;
  int count = 0;
  for (const unsigned char c : bytes) {
    bits = (bits << 8) | c;
    count += 8;
    while (count >= 6) {
      count -= 6;
      out.push_back(kBase64urlAlphabet[(bits >> count) & 0x3f]);
    }
  }
  if (count > 0) out.push_back(kBase64urlAlphabet[(bits << (6 - count)) & 0x3f]);
  return out;
}

std::optional<std::string> from_base64url(std::string_view text) {
  std::string out;
  std::uint32_t bits = 0;
  int count = 0;
  for (const char c : text) {
    const char* found = std::char_traits<char>::find(kBase64urlAlphabet, 64, c);
    if (found == nullptr) return std::nullopt;
    bits = (bits << 6) | static_cast<std::uint32_t>(found - kBase64urlAlphabet);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xff));
    }
  }
  return out;
}

}  // namespace runledger::digest
