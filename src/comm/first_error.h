// One rank's error as every rank's: each rank passes its own message (empty: none) and every
// rank gets the first rank's that is not empty, so that the ranks stop together, with the same
// words, whichever of them the launcher reports first.
#pragma once

#include <string>
#include <string_view>

#include "comm/comm.h"

namespace anvil {

// The first rank's error message (empty: none), on every rank; `comm` null: one process.
std::string first_error(Comm* comm, const std::string& mine, std::string_view tag);

}  // namespace anvil
