// llguidance's packed token mask applied to float32 logits rows. Built by fucina_jobs/native, called
// by decoding/constraint.py, which says why.
#include <algorithm>
#include <cstdint>
#include <limits>

// Every logit of `row` (`n` wide) whose bit in `mask` (`words` 32-bit words) is clear, and every column
// past the mask's bits, set to -inf.
extern "C" void fucina_apply_bitmask(float* row, int64_t n, const uint32_t* mask, int64_t words) {
  const float banned = -std::numeric_limits<float>::infinity();
  const int64_t covered = std::min(n, words * 32);
  for (int64_t w = 0; w * 32 < covered; ++w) {
    const uint32_t bits = mask[w];
    if (bits == ~0u) continue;
    float* x = row + w * 32;
    const int64_t width = std::min<int64_t>(32, covered - w * 32);
    if (bits == 0) {  // most words of a grounded value's mask: stores alone, no loads
      std::fill(x, x + width, banned);
      continue;
    }
    for (int64_t i = 0; i < width; ++i) x[i] = (bits >> i & 1) ? x[i] : banned;
  }
  std::fill(row + covered, row + n, banned);
}

// fucina_apply_bitmask for `n` rows at once, each row and mask at its own address: the first `vocab`
// columns of a row by its mask's bits, the rest of its `width` set to -inf. Rows are spread over
// `threads` where there are enough of them: a step of 128 streams masks a few hundred rows.
extern "C" void fucina_apply_bitmasks(float* const* rows, const uint32_t* const* masks, int64_t n, int64_t vocab, int64_t width,
                                      int64_t words, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (n * width >= (1 << 18))
  for (int64_t r = 0; r < n; ++r) {
    fucina_apply_bitmask(rows[r], vocab, masks[r], words);
    std::fill(rows[r] + vocab, rows[r] + width, -std::numeric_limits<float>::infinity());
  }
}
