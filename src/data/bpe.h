// The byte-level BPE model: the vocabulary (ids <-> raw bytes), the merge table, and the merge
// loop that turns one pre-tokenized word into ids.
//
// The merge loop follows the reference's heap: start from one symbol per byte, repeatedly merge
// the adjacent pair of lowest merge rank (leftmost first). Words are cached per thread. The two
// tables are open-addressing hash tables, inline here: their lookups are the loop's inner work.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/byte_level.h"

namespace anvil {

// Open-addressing map (pair of ids) -> (rank, merged id): the BPE inner loop's only lookup.
class MergeTable {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  bool insert(int32_t a, int32_t b, int32_t rank, int32_t merged) {
    const uint64_t key = pack(a, b);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].rank < 0) {
        slots_[i] = Slot{key, rank, merged};
        return true;
      }
      if (slots_[i].key == key) return false;  // keep the first (lowest) rank, as HF
    }
  }
  const std::pair<int32_t, int32_t>* find(int32_t a, int32_t b, std::pair<int32_t, int32_t>* out) const {
    const uint64_t key = pack(a, b);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].rank < 0) return nullptr;
      if (slots_[i].key == key) {
        *out = {slots_[i].rank, slots_[i].merged};
        return out;
      }
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    int32_t rank = -1, merged = -1;
  };
  static uint64_t pack(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot_of(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// The model vocabulary: each entry's raw bytes in one buffer, an open-addressing index from
// bytes to id, and id -> bytes. Entries are added in file order; when two entries have the same
// bytes the first keeps them (lookups), and when two entries share an id the last names its
// bytes (id -> bytes). Built once at load, then read only.
class Vocab {
 public:
  void reserve(size_t entries, size_t bytes) {
    blob_.reserve(bytes);
    entries_.reserve(entries);
  }
  // Appends the bytes of token (byte-level characters) as the bytes of id.
  void add(std::string_view token, int32_t id) {
    const size_t start = blob_.size();
    append_byte_level_bytes(token, blob_);
    entries_.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(blob_.size() - start), id});
  }
  // After the last add: builds the index and id -> bytes for ids below id_count.
  void finish(size_t id_count) {
    size_t cap = 16;  // load at most 2/3: lookups are rare after load, and memory is load time
    while (cap * 2 < entries_.size() * 3) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    id_entry_.assign(id_count, -1);
    for (size_t e = 0; e < entries_.size(); ++e) {
      const std::string_view key = entry_bytes(e);
      const uint64_t h = hash(key);
      for (size_t i = h & mask_;; i = (i + 1) & mask_) {
        if (slots_[i].entry < 0) {
          slots_[i] = Slot{static_cast<uint32_t>(h >> 32), static_cast<int32_t>(e)};
          break;
        }
        if (slots_[i].tag == static_cast<uint32_t>(h >> 32) && entry_bytes(static_cast<size_t>(slots_[i].entry)) == key)
          break;  // the first entry with these bytes keeps them
      }
      id_entry_[static_cast<size_t>(entries_[e].id)] = static_cast<int32_t>(e);
    }
  }
  int32_t find(std::string_view bytes) const {
    const uint64_t h = hash(bytes);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.entry < 0) return -1;
      if (s.tag == static_cast<uint32_t>(h >> 32) && entry_bytes(static_cast<size_t>(s.entry)) == bytes)
        return entries_[static_cast<size_t>(s.entry)].id;
    }
  }
  // The bytes of id ("" when no entry has it; id below finish's id_count).
  std::string_view bytes_of(int32_t id) const {
    const int32_t e = id_entry_[static_cast<size_t>(id)];
    return e < 0 ? std::string_view() : entry_bytes(static_cast<size_t>(e));
  }
  bool has_id(int32_t id) const { return id_entry_[static_cast<size_t>(id)] >= 0; }

 private:
  struct Entry {
    uint32_t start, length;
    int32_t id;
  };
  struct Slot {
    uint32_t tag = 0;  // the hash's high half
    int32_t entry = -1;
  };
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s) * 0x9E3779B97F4A7C15ull; }
  std::string_view entry_bytes(size_t e) const {
    return std::string_view(blob_).substr(entries_[e].start, entries_[e].length);
  }
  std::string blob_;
  std::vector<Entry> entries_;
  std::vector<int32_t> id_entry_;  // id -> entry, -1 when none
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

struct BpeModel {
  Vocab vocab;
  int32_t byte_id[256];  // the id of each single byte, -1 when the vocabulary lacks it
  MergeTable merges;
  bool ignore_merges = false;  // a word that is itself in the vocabulary is one id
  uint64_t uid = next_uid();   // names this model in the per-thread word cache

  static uint64_t next_uid();  // 1, 2, ...: a fresh name for every model built

  // Appends the ids of one word (raw bytes), through the per-thread cache.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_word_uncached(std::string_view word, std::vector<int32_t>& out) const;
};

}  // namespace anvil
