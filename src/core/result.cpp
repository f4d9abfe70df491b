#include "sluice/result.h"

namespace sluice {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kStoreUnavailable: return "store_unavailable";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kProtocol: return "protocol_error";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kCircuitOpen: return "circuit_open";
  }
  return "unknown";
}

}  // namespace sluice
