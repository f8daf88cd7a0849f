// Names of enum values, both ways, from one table: a value's name for messages and files, and the
// value a name (a flag, a file's field) stands for. One table keeps the two directions in step.
#pragma once

#include <cstddef>
#include <string_view>

namespace anvil {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The name of v in table, or "?" when the table lacks it.
template <class E, size_t N>
const char* enum_name(const EnumName<E> (&table)[N], E v) {
  for (const EnumName<E>& e : table)
    if (e.value == v) return e.name;
  return "?";
}

// The value named `name` in table into *out; false (out untouched) when no entry has that name.
template <class E, size_t N>
bool enum_from_name(const EnumName<E> (&table)[N], std::string_view name, E* out) {
  for (const EnumName<E>& e : table)
    if (name == e.name) {
      *out = e.value;
      return true;
    }
  return false;
}

}  // namespace anvil
