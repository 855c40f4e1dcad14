// Rows of the coordinator's tables as structs, and the nullable parameters of its statements.
// Private to coordinator/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <pqxx/pqxx>

#include "coordinator/coordinator.h"

namespace runledger::coordinator {

Instance instance_from_row(const pqxx::row& row);
StepRecord step_from_row(const pqxx::row& row);
// A nullable text column.
std::optional<std::string> optional_text(const pqxx::field& field);
// A nullable jsonb column.
json json_from(const pqxx::field& field);
// A nullable jsonb parameter: null JSON is SQL NULL.
std::optional<std::string> json_text(const json& value);
// A nullable bigint parameter (milliseconds, epoch times).
std::optional<std::string> int_text(std::optional<std::int64_t> value);

}  // namespace runledger::coordinator
