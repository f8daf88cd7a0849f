// The global functions chat templates call (range, namespace, dict, raise_exception,
// strftime_now), as jinja2 and Hugging Face's renderer give them (see internal.h).
#include <ctime>

#include "core/error.h"
#include "data/jinja/internal.h"

namespace anvil::jinja::detail {

namespace {

constexpr uint64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

Value builtin_range(const List& a, const Dict&) {
  int64_t b = 0, e = 0, s = 1;
  ANVIL_ENSURE(!a.empty() && a.size() <= 3, kInvalidInput, "range() takes 1 to 3 arguments");
  if (a.size() == 1) e = inum(a[0]);
  else {
    b = inum(a[0]);
    e = inum(a[1]);
    if (a.size() == 3) s = inum(a[2]);
  }
  ANVIL_ENSURE(s != 0, kInvalidInput, "range() step cannot be zero");
  // The length as Python computes it, in uint64 where int64 would overflow (b, e and s are any
  // int64), then jinja2's sandbox limit, which transformers renders under: range(100001) is an
  // error there too.
  const bool up = s > 0;
  if (up ? e <= b : e >= b) return Value(List());
  const uint64_t span = up ? static_cast<uint64_t>(e) - static_cast<uint64_t>(b)
                           : static_cast<uint64_t>(b) - static_cast<uint64_t>(e);
  const uint64_t step = up ? static_cast<uint64_t>(s) : 0 - static_cast<uint64_t>(s);
  const uint64_t len = (span - 1) / step + 1;
  ANVIL_ENSURE(len <= kMaxRange, kInvalidInput, "range() of more than ", kMaxRange,
               " items (jinja2's sandbox blocks ranges larger than MAX_RANGE)");
  List out;
  for (uint64_t k = 0; k < len; ++k)  // b + k * s modulo 2^64: the item, inside [b, e)
    out.emplace_back(static_cast<int64_t>(static_cast<uint64_t>(b) + k * static_cast<uint64_t>(s)));
  return Value(std::move(out));
}

Value builtin_namespace(const List& a, const Dict& kw) {
  Dict d;
  if (!a.empty() && a[0].is_dict()) d = a[0].dict();
  for (const auto& [k, v] : kw) d.emplace_back(k, v);
  return Value::make_namespace(std::move(d));
}

Value builtin_strftime_now(const List& a, const Dict&) {
  ANVIL_ENSURE(a.size() == 1 && a[0].is_string(), kInvalidInput, "strftime_now(format) takes one string");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, a[0].str().c_str(), &tm);
  return Value(std::string(buf, n));
}

}  // namespace

Dict builtin_functions() {
  return {{"range", Value::function(builtin_range)},
          {"namespace", Value::function(builtin_namespace)},
          {"dict", Value::function([](const List&, const Dict& kw) { return Value(kw); })},
          {"raise_exception", Value::function([](const List& a, const Dict&) -> Value {
             raise(ErrorKind::kInvalidInput, "chat template raised an exception: ", a.empty() ? "" : to_output(a[0]));
           })},
          {"strftime_now", Value::function(builtin_strftime_now)}};
}

}  // namespace anvil::jinja::detail
