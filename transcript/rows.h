// Conversions between bytea and bytes. Private to transcript/.
#pragma once

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

}  // namespace runledger::transcript
