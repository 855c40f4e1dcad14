// Input checks done before anything reaches the database. Private to ledger/.
#pragma once

#include <string_view>

namespace runledger::ledger {

// 1-255 bytes of valid UTF-8 with no control characters; InvalidArgument naming `what` otherwise.
void check_key(std::string_view value, std::string_view what);
// 1-255 characters of [A-Za-z0-9_.:-].
void check_instance_id(std::string_view value, std::string_view what);

}  // namespace runledger::ledger
