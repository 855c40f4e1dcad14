#include "transcript/rows.h"

#include <cstring>

#include "errors/errors.h"

namespace runledger::transcript {

pqxx::binarystring bytes_param(std::string_view bytes) {
  return pqxx::binarystring(bytes.data(), bytes.size());
}

std::string bytes_from(const pqxx::field& field) {
  const pqxx::binarystring b(field);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

digest::Sha256Digest digest_from(const pqxx::field& field) {
  const pqxx::binarystring b(field);
  digest::Sha256Digest out{};
  if (b.size() != out.size()) throw std::runtime_error("stored sha256 is not 32 bytes");
  std::memcpy(out.data(), b.data(), out.size());
  return out;
}

void check_entry_size(std::string_view body, std::size_t max) {
  if (body.size() > max) {
    throw InvalidArgument("transcript entry is larger than " + std::to_string(max) + " bytes",
                          {{"field", "body"}, {"bytes", body.size()}});
  }
}

}  // namespace runledger::transcript
