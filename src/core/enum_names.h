// Names of enum values, both ways, from one table: a value's name for messages and files, and the
// value a name (a flag, a file's field) stands for. One table keeps the two directions in step;
// parse_enum's kUsage error lists the table's names as the choices.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/error.h"

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

// "a, b or c": the names in the table's order.
template <class E, size_t N>
std::string enum_choices(const EnumName<E> (&table)[N]) {
  std::string s;
  for (size_t i = 0; i < N; ++i) s += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + table[i].name;
  return s;
}

// The value a flag names; what: the setting, for the error ("unknown <what> '<name>' (<choices>)").
template <class E, size_t N>
E parse_enum(const EnumName<E> (&table)[N], const std::string& name, const char* what) {
  E out{};
  if (!enum_from_name(table, name, &out))
    raise(ErrorKind::kUsage, "unknown ", what, " '", name, "' (", enum_choices(table), ")");
  return out;
}

}  // namespace anvil
