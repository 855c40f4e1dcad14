// Rows of the coordinator's tables as structs. Private to coordinator/.
#pragma once

#include <pqxx/pqxx>

#include "coordinator/coordinator.h"

namespace runledger::coordinator {

Instance instance_from_row(const pqxx::row& row);
StepRecord step_from_row(const pqxx::row& row);
// A nullable jsonb column.
json json_from(const pqxx::field& field);

}  // namespace runledger::coordinator
