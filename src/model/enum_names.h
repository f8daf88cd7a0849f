// The names of the settings a flag chooses (--recompute, --mode, --grad-dtype): one table of
// (value, name) per enum gives both the parse, whose kUsage error lists the choices, and the
// name back.
#pragma once

#include <cstddef>
#include <string>

#include "core/error.h"

namespace anvil {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// "a, b or c": the names in the table's order.
template <class E, size_t N>
std::string enum_choices(const EnumName<E> (&names)[N]) {
  std::string s;
  for (size_t i = 0; i < N; ++i) s += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + names[i].name;
  return s;
}

// what: the setting, for the error ("unknown <what> '<name>' (<choices>)").
template <class E, size_t N>
E parse_enum(const EnumName<E> (&names)[N], const std::string& name, const char* what) {
  for (const EnumName<E>& n : names)
    if (name == n.name) return n.value;
  raise(ErrorKind::kUsage, "unknown ", what, " '", name, "' (", enum_choices(names), ")");
}

template <class E, size_t N>
const char* enum_name(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& n : names)
    if (n.value == value) return n.name;
  return "?";
}

}  // namespace anvil
