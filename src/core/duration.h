// Durations as people read them in logs and reports.
#pragma once

#include <string>

namespace anvil {

// "H:MM:SS", rounded to the nearest second (hours are not wrapped: "27:03:09").
std::string format_hms(double seconds);

}  // namespace anvil
