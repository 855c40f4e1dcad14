// SHA-256 through OpenSSL's EVP interface (the SHA256_* functions are deprecated in OpenSSL 3),
// and the text forms of bytes.
//
// Contract: Sha256 hashes the bytes fed to update() in order; finish() returns the 32-byte digest
// and may be called once. hex() renders any bytes as lowercase hexadecimal; base64url() as
// base64url without padding (RFC 4648 section 5, for text that travels in URLs and headers), which
// from_base64url() reverses.
// Thread-safety: a Sha256 object belongs to one thread; the free functions are thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace runledger::digest {

using Sha256Digest = std::array<unsigned char, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& update(std::string_view bytes);
  Sha256Digest finish();

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

Sha256Digest sha256(std::string_view bytes);
std::string hex(std::string_view bytes);
std::string hex(const Sha256Digest& digest);

std::string base64url(std::string_view bytes);
// The bytes `text` encodes; nullopt when a character of it is not in the base64url alphabet.
std::optional<std::string> from_base64url(std::string_view text);

}  // namespace runledger::digest
