// Numbers as people read them in logs: counts grouped by thousands ("26,700"), sizes and
// durations with three significant digits and a unit ("1.66 MB", "10.8 ms"), memory in GiB
// with fixed decimals ("79.25"), and counted nouns that agree with their count ("1 sequence",
// "2 sequences").
#pragma once

#include <cstdint>
#include <string>

namespace anvil {

std::string format_count(double v);     // rounded to a whole number: "1,064"
std::string format_bytes(double bytes);  // decimal units: "512 B", "1.66 MB", "3.44 GB"
std::string format_seconds(double s);    // "812 us", "10.8 ms", "1.25 s", "95.0 s"
std::string count_of(int64_t n, const std::string& noun);  // "1 sequence", "2 sequences"
// Bytes in GiB (2^30 bytes) with `decimals` digits after the point, without the unit: "79.25".
std::string gib(double bytes, int decimals = 2);

}  // namespace anvil
