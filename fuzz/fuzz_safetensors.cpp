// Fuzz target: a safetensors file, as a model folder's model.safetensors is opened (header,
// every tensor's entry checked against the file) and its tensors read as numbers.
#include "fuzz_input.h"
#include "io/safetensors.h"

namespace {

void read_values(const anvil::SafeTensorInfo& t) {
  if (t.bytes > (1u << 20)) return;  // the conversions, not the fuzzer's memory, are under test
  const anvil::DType d = t.dtype;
  if (d == anvil::DType::kI64 || d == anvil::DType::kI32) anvil::read_as_i64(t);
  else anvil::read_as_f64(t);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = anvil::fuzz::write_input("model.safetensors", data, size);
  anvil::fuzz::expect_clean([&] {
    const anvil::SafetensorsFile file(path);
    for (const anvil::SafeTensorInfo& t : file.tensors()) anvil::fuzz::expect_clean([&] { read_values(t); });
    file.metadata().dump();
  });
  return 0;
}
