// BpeModel's merge loop and its per-thread word cache (see bpe.h).
#include "data/bpe.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>

namespace anvil {

uint64_t BpeModel::next_uid() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  constexpr size_t kMaxCachedWord = 256, kMaxCacheEntries = 1 << 18;
  struct Cache {
    uint64_t owner = 0;
    std::unordered_map<std::string, std::vector<int32_t>> words;
  };
  thread_local Cache cache;
  if (word.size() > kMaxCachedWord) {
    encode_word_uncached(word, out);
    return;
  }
  if (cache.owner != uid) {
    cache.words.clear();
    cache.owner = uid;
  }
  thread_local std::string key;
  key.assign(word);
  auto it = cache.words.find(key);
  if (it != cache.words.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t before = out.size();
  encode_word_uncached(word, out);
  if (cache.words.size() >= kMaxCacheEntries) cache.words.clear();
  cache.words.emplace(key, std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
}

void BpeModel::encode_word_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    const int32_t id = vocab.find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  struct Symbol {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, pos, left, right;
  };
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Candidate> heap;
  sym.clear();
  heap.clear();
  for (char c : word) {
    const int32_t id = byte_id[static_cast<unsigned char>(c)];
    if (id < 0) continue;  // a byte outside the vocabulary is dropped (no unk token)
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, -1});
    if (n > 0) sym[static_cast<size_t>(n - 1)].next = n;
  }
  // Min-heap on (rank, position): the lowest rank first, leftmost among equals.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::pair<int32_t, int32_t> hit;
  const auto consider = [&](int32_t pos) {
    if (pos < 0) return;
    const Symbol& l = sym[static_cast<size_t>(pos)];
    if (l.next < 0) return;
    const Symbol& r = sym[static_cast<size_t>(l.next)];
    if (merges.find(l.id, r.id, &hit)) {
      heap.push_back({hit.first, pos, l.id, r.id});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(sym.size()); ++k) consider(k);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& l = sym[static_cast<size_t>(c.pos)];
    if (l.id != c.left || l.next < 0) continue;
    Symbol& r = sym[static_cast<size_t>(l.next)];
    if (r.id != c.right) continue;
    merges.find(l.id, r.id, &hit);
    l.id = hit.second;
    r.id = -1;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = c.pos;
    consider(l.prev);
    consider(c.pos);
  }
  for (int32_t k = sym.empty() ? -1 : 0; k >= 0; k = sym[static_cast<size_t>(k)].next)
    out.push_back(sym[static_cast<size_t>(k)].id);
}

}  // namespace anvil
