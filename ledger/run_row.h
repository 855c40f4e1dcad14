// Mapping of live_runs rows to ledger::Run. Private to ledger/.
#pragma once

#include "ledger/ledger.h"

namespace runledger::ledger {

Run run_from_row(const pqxx::row& row);

}  // namespace runledger::ledger
