// One rank's error as every rank's (see comm/first_error.h).
#include "comm/first_error.h"

namespace anvil {

std::string first_error(Comm* comm, const std::string& mine, std::string_view tag) {
  if (!comm) return mine;
  const auto len = static_cast<size_t>(comm->host_max(static_cast<double>(mine.size()), tag));
  if (len == 0) return "";
  std::string padded = mine;
  padded.resize(len, '\0');
  std::string all(len * static_cast<size_t>(comm->world()), '\0');
  comm->host_all_gather(padded.data(), len, all.data(), tag);
  for (size_t at = 0; at < all.size(); at += len)
    if (all[at] != '\0') return std::string(all.c_str() + at);
  return "";
}

}  // namespace anvil
