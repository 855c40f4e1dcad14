// Conversions between bytea and bytes. Private to transcript/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "digest/digest.h"
#include "ledger/ledger.h"

namespace runledger::transcript {

// A bytea parameter, sent in binary (no escaping, no text conversion).
pqxx::binarystring bytes_param(std::string_view bytes);
// A bytea field as the exact bytes (libpqxx 6.4 receives bytea as hex text).
std::string bytes_from(const pqxx::field& field);
digest::Sha256Digest digest_from(const pqxx::field& field);

void check_entry_size(std::string_view body, std::size_t max);

// An optional seq as a statement parameter (libpqxx 6.4 sends a null `const char*` as NULL).
struct SeqParam {
  explicit SeqParam(std::optional<std::int64_t> seq)
      : text(seq ? std::optional(std::to_string(*seq)) : std::nullopt) {}
  const char* get() const { return text ? text->c_str() : nullptr; }
  std::optional<std::string> text;
};

}  // namespace runledger::transcript
