// Each float32 logits row's greedy token and its log-probability, for many rows at once. Built by
// fucina_jobs/native, called by decoding/sampler.py (``row_stats``), which says why.
#include <algorithm>
#include <cmath>
#include <limits>

#include "native.h"

namespace {

constexpr int64_t PARALLEL = 1 << 18;  // elements: below this a step's few rows stay on one thread
constexpr int64_t BLOCK = 512;

// The first maximum of `x` (numpy's argmax: the first NaN, if any, counts as the maximum) and the
// log-softmax there, -log(sum(exp(x - max))): NaN where the maximum is NaN or infinite, as torch gives.
void stats(const float* x, int64_t n, int64_t* best, double* log_prob) {
  float top = -std::numeric_limits<float>::infinity();
  int nan = 0;
#pragma omp simd reduction(max : top) reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) {
    top = x[i] > top ? x[i] : top;
    nan |= x[i] != x[i];
  }
  int64_t b = 0;
  while (b < n && !(nan ? x[b] != x[b] : x[b] == top)) ++b;
  *best = b;
  if (nan || !std::isfinite(top)) {
    *log_prob = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  double sum = 0;  // float sums of short blocks, added up in double: as close as torch's log_softmax
  for (int64_t start = 0; start < n; start += BLOCK) {
    const int64_t end = std::min(n, start + BLOCK);
    float block = 0;
#pragma omp simd reduction(+ : block)
    for (int64_t i = start; i < end; ++i) block += fucina::exp_nonpositive(x[i] - top);
    sum += block;
  }
  *log_prob = -std::log(sum);
}

}  // namespace

// `stats` of `n` rows of `width` floats, each at its own address; one thread per row at most.
extern "C" void fucina_row_stats(const float* const* rows, int64_t n, int64_t width, int64_t* best, double* log_prob, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (n * width >= PARALLEL)
  for (int64_t r = 0; r < n; ++r) stats(rows[r], width, best + r, log_prob + r);
}
