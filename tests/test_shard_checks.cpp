// A shard's chunk checksums checked as it is read (io/shard_checks.h): a chunk a read touches
// is hashed then, the others by check_rest, each once; a mismatch names the file and the
// chunk's bytes, as validate_checkpoint does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/fs.h"
#include "core/hash.h"
#include "io/checkpoint_files.h"
#include "io/parallel_file.h"
#include "io/safetensors.h"
#include "io/shard_checks.h"
#include "testing.h"

namespace anvil {
namespace {

// A shard of one tensor spanning three chunks (the last one short), and its record.
struct Shard {
  std::string path;
  Json record;
  std::string bytes;
};

Shard write_three_chunks(const std::string& tag) {
  const int64_t n = static_cast<int64_t>(2 * kFileChunk / 4 + 1000);
  Shard s;
  s.path = path_join(testing::temp_dir(tag), "rank-00000.safetensors");
  const ShardRecord rec = write_shard(s.path, {{"master.0", n}}, [](size_t, int64_t begin, int64_t k, float* out) {
    for (int64_t i = 0; i < k; ++i) out[i] = static_cast<float>((begin + i) % 9973) * 0.5f;
  });
  s.record = {{"chunk_bytes", kFileChunk}, {"chunk_xxh64", rec.chunks}};
  s.bytes = read_file(s.path);
  return s;
}

// The file with byte `at` flipped; returns its bytes.
std::string flip(const Shard& s, uint64_t at) {
  std::string b = s.bytes;
  b[at] ^= 0x01;
  write_file_atomic(s.path, b);
  return b;
}

TEST(ShardChecks, AReadFindsACorruptChunkItTouches) {
  const Shard s = write_three_chunks("shard_checks_read");
  ASSERT_EQ(s.record["chunk_xxh64"].size(), 3u);
  const std::string corrupt = flip(s, kFileChunk + 5);
  const SafetensorsFile f(s.path);
  ShardChecks c(s.path, f.bytes(), f.size(), s.record);
  c.check(0, 100);  // chunk 0 only
  EXPECT_EQ(c.error(), "");
  c.check(kFileChunk - 8, kFileChunk + 8);  // the end of chunk 0 and the start of chunk 1
  EXPECT_EQ(c.error(), cat(s.path, ": checksum ", hash_hex(std::string_view(corrupt).substr(kFileChunk, kFileChunk)),
                           " of bytes [", kFileChunk, ", ", 2 * kFileChunk, ") differs from ",
                           s.record["chunk_xxh64"][1].get<std::string>(), " recorded in meta.json (the file is corrupt)"));
  EXPECT_EQ(c.check_rest(2), c.error());
}

TEST(ShardChecks, TheRestFindsACorruptChunkNoReadTouched) {
  const Shard s = write_three_chunks("shard_checks_rest");
  flip(s, s.bytes.size() - 3);
  const SafetensorsFile f(s.path);
  ShardChecks c(s.path, f.bytes(), f.size(), s.record);
  c.check(0, kFileChunk);
  EXPECT_EQ(c.error(), "") << "chunk 2 is not read yet";
  const std::string why = c.check_rest(3);
  EXPECT_NE(why.find(cat(s.path, ": checksum ")), std::string::npos) << why;
  EXPECT_NE(why.find(cat(" of bytes [", 2 * kFileChunk, ", ", s.bytes.size(), ") differs from ")), std::string::npos)
      << why;
}

TEST(ShardChecks, AnIntactShardPassesAndAWrongChunkCountIsNamed) {
  const Shard s = write_three_chunks("shard_checks_ok");
  const SafetensorsFile f(s.path);
  ShardChecks ok(s.path, f.bytes(), f.size(), s.record);
  ok.check(10, 2 * kFileChunk + 10);
  EXPECT_EQ(ok.check_rest(4), "");
  Json short_record = s.record;
  short_record["chunk_xxh64"].erase(2);
  ShardChecks wrong(s.path, f.bytes(), f.size(), short_record);
  EXPECT_EQ(wrong.check_rest(1), cat(s.path, ": 3 chunks of ", kFileChunk, " bytes, meta.json records 2"));
}

}  // namespace
}  // namespace anvil
