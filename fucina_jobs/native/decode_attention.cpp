// Attention over the slotted key/value store, on a CPU: every sequence of a step (prompt chunks
// included) in one call per layer. Built by fucina_jobs/native, called by models/decode_attention.py,
// which says why it exists.
//
// One work item is one sequence, one kv head and up to 64 of its query rows (the heads that share
// the kv head, times the sequence's new tokens), against the sequence's keys. Each row's sums run over the head dim
// and over the keys in a fixed order, whatever the other rows are, so a row's output is the same bit
// for bit alone or in any batch.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "native.h"

namespace {

using namespace fucina;

constexpr int64_t CHUNK = 64;  // query rows a pass at most: the scores of a long prompt chunk stay small

struct Buffers {
  std::vector<char> scores, queries;
};

// Rows [first, first + n) of a work item, at most CHUNK: query row r = g * count + j is query head
// h * group + g at packed token start + j, and sees keys [0, length - count + j]. On a ring (ring > 0,
// a sliding layer's store bounded to its window and a forward's new tokens) position p is at p % ring.
template <typename S, int DIM, typename T = typename Compute<S>::type>
void attend_rows(S* out, int64_t os0, int64_t os1, const S* q, int64_t qs0, int64_t qs1, const S* kh, const S* vh,
                 int64_t group, int64_t h, int64_t start, int64_t count, int64_t length, T scale,
                 int64_t window, int64_t ring, T softcap, int64_t first, int64_t n, Buffers& buf) {
  constexpr int W = LANES<T>, C = DIM / W, K = 8;
  const auto at = [ring](int64_t key) { return ring > 0 ? key % ring : key; };  // a key position's row
  constexpr bool same = std::is_same_v<S, T>;  // else keys and values are widened a block at a time
  const int64_t blocks = (n + W - 1) / W, lanes = blocks * W;
  // Keys [low, limit) each row sees; the chunk's rows together see [lo, reach). A sliding window of W keys
  // lets a query at position p see keys (p - W, p]; the loops below run over positions, read at ``at``.
  int64_t limit[CHUNK] = {}, low[CHUNK] = {}, reach = 0, lo = length;
  // Queries transposed, W rows to a block, so that a key's scores for W rows are one vector.
  buf.queries.assign(blocks * DIM * W * sizeof(T), 0);
  buf.scores.resize(length * lanes * sizeof(T));
  T* qt = reinterpret_cast<T*>(buf.queries.data());
  T* scores = reinterpret_cast<T*>(buf.scores.data());  // [key][lane]
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = (first + i) / count, j = (first + i) % count;
    const S* qr = q + (start + j) * qs0 + (h * group + g) * qs1;
    for (int64_t d = 0; d < DIM; ++d) qt[(i / W) * DIM * W + d * W + i % W] = widen(qr[d]) * scale;
    limit[i] = length - count + j + 1;
    low[i] = window > 0 ? std::max<int64_t>(0, limit[i] - window) : 0;
    reach = limit[i] > reach ? limit[i] : reach;
    lo = low[i] < lo ? low[i] : lo;
  }
  alignas(64) T tail[K * DIM];  // the last few keys zero-padded (every key takes the same arithmetic), or widened
  for (int64_t b = 0; b < blocks; ++b) {  // scores, eight keys at a time: eight independent sums
    const T* qb = qt + b * DIM * W;
    for (int64_t key = lo; key < reach; key += K) {
      const int m = reach - key < K ? static_cast<int>(reach - key) : K;
      const T* kr;
      const bool wraps = ring > 0 && at(key) + m > ring;  // the block's keys cross the ring's end
      if constexpr (same) kr = kh + at(key) * DIM;
      if (!same || m < K || wraps) {
        for (int k = 0; k < K; ++k) {
          const S* src = k < m ? kh + at(key + k) * DIM : nullptr;
          for (int64_t d = 0; d < DIM; ++d) tail[k * DIM + d] = src ? widen(src[d]) : T(0);
        }
        kr = tail;
      }
      V<T> s[K] = {};
      for (int64_t d = 0; d < DIM; ++d) {
        const V<T> qd = load(qb + d * W);
        for (int k = 0; k < K; ++k) s[k] += kr[k * DIM + d] * qd;
      }
      for (int k = 0; k < m; ++k) store(scores + (key + k) * lanes + b * W, s[k]);
    }
  }
  if (softcap > 0)  // Gemma 2's logit soft-capping, on the scaled scores before any mask
    for (int64_t key = lo; key < reach; ++key)
      for (int64_t i = 0; i < n; ++i) scores[key * lanes + i] = softcap * std::tanh(scores[key * lanes + i] / softcap);
  for (int64_t i = 0; i < n; ++i) {  // each row's keys past its own token, and before its window
    for (int64_t key = limit[i]; key < reach; ++key) scores[key * lanes + i] = -INFINITY;
    for (int64_t key = lo; key < low[i]; ++key) scores[key * lanes + i] = -INFINITY;
  }
  T top[CHUNK], sums[CHUNK];
  for (int64_t i = 0; i < lanes; ++i) top[i] = -INFINITY, sums[i] = T(0);
  for (int64_t key = lo; key < reach; ++key)
    for (int64_t i = 0; i < lanes; ++i) top[i] = scores[key * lanes + i] > top[i] ? scores[key * lanes + i] : top[i];
  for (int64_t key = lo; key < reach; ++key)  // a row past its own keys adds exact zeros, here and below
    for (int64_t i = 0; i < lanes; ++i) {
      T& p = scores[key * lanes + i];
      p = exp_nonpositive(p - top[i]);
      sums[i] += p;
    }
  for (int64_t i0 = 0; i0 < n; i0 += 4) {  // values, four rows a pass: each value row is read once for them
    const int64_t nr = n - i0 < 4 ? n - i0 : 4;
    int64_t upto = 0;
    for (int64_t i = 0; i < nr; ++i) upto = limit[i0 + i] > upto ? limit[i0 + i] : upto;
    V<T> a[4][C] = {};
    for (int64_t key = lo, r = at(lo); key < upto; ++key, r = r + 1 == ring ? 0 : r + 1) {  // r: the key's row
      const S* vr = vh + r * DIM;
      V<T> v[C];
      if constexpr (same) {
        for (int c = 0; c < C; ++c) v[c] = load(vr + c * W);
      } else {
        alignas(64) T row[DIM];
        for (int64_t d = 0; d < DIM; ++d) row[d] = widen(vr[d]);
        for (int c = 0; c < C; ++c) v[c] = load(row + c * W);
      }
      const T* p = scores + key * lanes + i0;
      for (int i = 0; i < 4; ++i)
        for (int c = 0; c < C; ++c) a[i][c] += p[i] * v[c];
    }
    for (int64_t i = 0; i < nr; ++i) {
      const int64_t r = first + i0 + i;
      S* o = out + (start + r % count) * os0 + (h * group + r / count) * os1;
      const T inv = T(1) / sums[i0 + i];
      alignas(64) T row[DIM];
      for (int c = 0; c < C; ++c) store(row + c * W, a[i][c] * inv);
      for (int64_t d = 0; d < DIM; ++d) o[d] = narrow<S>(row[d]);
    }
  }
}

template <typename S, int DIM, typename T = typename Compute<S>::type>
void attend(S* out, int64_t os0, int64_t os1, const S* q, int64_t qs0, int64_t qs1, const S* keys, const S* values,
            int64_t heads, int64_t kv_heads, int64_t capacity, const int64_t* spans, int64_t n_spans, T scale, int64_t window, int64_t ring, T softcap, int threads) {
  const int64_t group = heads / kv_heads;
  struct Item { int64_t span, h, first; };
  std::vector<Item> items;  // a sequence, a kv head, and up to CHUNK of their query rows
  for (int64_t i = 0; i < n_spans; ++i)
    for (int64_t h = 0; h < kv_heads; ++h)
      for (int64_t first = 0; first < group * spans[4 * i + 2]; first += CHUNK) items.push_back({i, h, first});
#pragma omp parallel num_threads(threads)
  {
    Buffers buf;
#pragma omp for schedule(dynamic)
    for (size_t k = 0; k < items.size(); ++k) {
      const Item& it = items[k];
      const int64_t* s = spans + 4 * it.span;  // slot, first token, tokens, length
      const int64_t base = (s[0] * kv_heads + it.h) * capacity * DIM, rows = group * s[2];
      attend_rows<S, DIM>(out, os0, os1, q, qs0, qs1, keys + base, values + base, group, it.h, s[1], s[2], s[3], scale, window, ring, softcap, it.first, std::min(CHUNK, rows - it.first), buf);
    }
  }
}

template <typename S>
int dispatch(void* out, int64_t os0, int64_t os1, const void* q, int64_t qs0, int64_t qs1, const void* k, const void* v,
             int64_t heads, int64_t kv_heads, int64_t capacity, int64_t dim, const int64_t* spans, int64_t n_spans,
             double scale, int64_t window, int64_t ring, double softcap, int threads) {
  using T = typename Compute<S>::type;
  const auto s = static_cast<T>(scale);
  const auto cap = static_cast<T>(softcap);
  S* o = static_cast<S*>(out);
  const S *qq = static_cast<const S*>(q), *keys = static_cast<const S*>(k), *values = static_cast<const S*>(v);
#define CASE(DIM) \
  case DIM: attend<S, DIM>(o, os0, os1, qq, qs0, qs1, keys, values, heads, kv_heads, capacity, spans, n_spans, s, window, ring, cap, threads); return 0;
  switch (dim) {
    CASE(16) CASE(32) CASE(64) CASE(128) CASE(256)
    default: return -1;
  }
}

}  // namespace

// out[t, head, :] for every token t of every span; spans: n_spans rows of (slot, start, count, length).
// window: keys a query sees, its own included (0: all); ring: positions a slot holds, position p at p % ring
// (0: every position, at its own row); softcap: Gemma 2's attention logit cap (0: none).
// Returns -1, writing nothing, for a head dim the kernel is not built for.
#define ENTRY(name, S)                                                                                              \
  extern "C" int name(void* out, int64_t os0, int64_t os1, const void* q, int64_t qs0, int64_t qs1, const void* keys, \
                      const void* values, int64_t heads, int64_t kv_heads, int64_t capacity, int64_t dim,            \
                      const int64_t* spans, int64_t n_spans, double scale, int64_t window, int64_t ring,               \
                      double softcap, int threads) {                                                                 \
    return dispatch<S>(out, os0, os1, q, qs0, qs1, keys, values, heads, kv_heads, capacity, dim, spans, n_spans,    \
                       scale, window, ring, softcap, threads);                                                    \
  }
ENTRY(fucina_decode_attention_f32, float)
ENTRY(fucina_decode_attention_f64, double)
ENTRY(fucina_decode_attention_bf16, BF16)
