// Durations: measured on the steady clock, and as people read them in logs and reports.
#pragma once

#include <chrono>
#include <string>

namespace anvil {

// Seconds on the steady clock since t0.
double seconds_since(std::chrono::steady_clock::time_point t0);

// "H:MM:SS", rounded to the nearest second (hours are not wrapped: "27:03:09").
std::string format_hms(double seconds);

}  // namespace anvil
