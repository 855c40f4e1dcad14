// The one place outcomes become HTTP answers: the status and the error envelope
// {code, message, details, request_id, retryable} of each runledger::Error, and the 500 that
// stands for anything unexpected. Private to server/.
#pragma once

#include <exception>
#include <string>

#include "errors/errors.h"
#include "server/exchange.h"

namespace runledger::server {

unsigned status_of(ErrorCode code);
Response error_response(const Error& error, const std::string& request_id);
// Inside a catch block: the answer for the exception being handled (an Error as above,
// anything else a 500 whose message says only the request id).
Response current_error_response(const std::string& request_id);

}  // namespace runledger::server
