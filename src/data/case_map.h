// Python's str.lower(), upper(), title() and capitalize(), which chat templates call:
// full case mappings (ß -> SS, ΰ -> Ϋ́, ŉ -> ʼN), Greek final sigma in lowercase, and title
// casing after any cased code point, as CPython 3.11 does them (Unicode 14.0).
#pragma once

#include <string>
#include <string_view>

namespace anvil {

enum class CaseMode { kLower, kUpper, kTitle, kCapitalize };

// s: valid UTF-8.
std::string python_case(std::string_view s, CaseMode mode);

}  // namespace anvil
