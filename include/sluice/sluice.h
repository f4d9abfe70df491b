// The whole public API of libsluice (sluice::core): limits, decisions, stores, the circuit breaker.
// See each header for what is thread-safe.
#pragma once

#include "sluice/algorithms.h"
#include "sluice/circuit_breaker.h"
#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/limit.h"
#include "sluice/local_store.h"
#include "sluice/result.h"
#include "sluice/store.h"
