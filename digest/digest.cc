#include "digest/digest.h"

#include <openssl/evp.h>

#include <stdexcept>

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

}  // namespace runledger::digest
