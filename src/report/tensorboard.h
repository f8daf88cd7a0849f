// TensorBoard event files, written by anvil itself (no TensorFlow, no protobuf library).
//
// A file events.out.tfevents.<unix time>.<host> in the folder holds TFRecord records: a
// little-endian uint64 length, the masked CRC32C of those 8 bytes, the data, the masked
// CRC32C of the data. Each record's data is an Event protobuf: wall_time (field 1, double),
// step (2, int64) and either file_version (3, "brain.Event:2", the first record) or a
// Summary (5) of Value{tag (1), simple_value (2, float)}. TensorBoard, tensorboardX and
// torch.utils.tensorboard write the same bytes for scalars.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace anvil {

uint32_t crc32c(const void* data, size_t n);
// TFRecord's masked CRC: the CRC rotated right by 15 bits, plus 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  // Creates `dir` when missing and a new event file in it (kIo when it cannot).
  explicit TensorBoardWriter(const std::string& dir);
  // One event at `step` holding each (tag, value) as a scalar; written through at once.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace anvil
