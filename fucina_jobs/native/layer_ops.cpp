// A decoder layer's element-wise ops, each fused into one pass: RMSNorm (with the residual add before
// it; Llama's, or Gemma's (1 + w) in float32), RoPE, and the MLP's activation-and-multiply (SiLU or
// GELU-tanh). Built by fucina_jobs/native, called by models/layer_ops.py, which says why.
//
// float32 and bfloat16, computed in float32. Every row is computed on its own, in a fixed order, so a
// row comes out the same whatever else the step holds. Where torch rounds a bfloat16 result between two
// ops, these round there too.
#include "native.h"

namespace {

using namespace fucina;

constexpr int64_t PARALLEL = 1 << 16;  // elements: below this a step's few rows stay on one thread

// out = weight * x / rms(x) for each of `heads` segments of n elements in each row (one segment: the
// hidden state; several: a projection's heads); with a residual, x += residual first, in place. `gemma`:
// Gemma's norm, (1 + weight) * x / rms(x) rounded once, where Llama's rounds x / rms(x) before the
// weight. out may be x itself (a head's norm in place).
template <typename S>
void rms_norm(S* out, int64_t os, S* x, int64_t xs, const S* residual, int64_t rs, const S* weight, int64_t rows,
              int64_t heads, int64_t n, float eps, bool gemma, int threads) {
  constexpr int W = LANES<float>;
#pragma omp parallel for num_threads(threads) if (rows * heads * n >= PARALLEL)
  for (int64_t item = 0; item < rows * heads; ++item) {
    const int64_t r = item / heads, h = item % heads;
    S* xr = x + r * xs + h * n;
    if (residual)
      for (int64_t i = 0; i < n; ++i) xr[i] = narrow<S>(widen(xr[i]) + widen(residual[r * rs + h * n + i]));
    alignas(64) float block[W];
    V<float> acc = {};
    int64_t i = 0;
    for (; i + W <= n; i += W) {
      for (int k = 0; k < W; ++k) block[k] = widen(xr[i + k]);
      const V<float> v = load(block);
      acc += v * v;
    }
    float sum = 0;
    for (int k = 0; k < W; ++k) sum += acc[k];
    for (; i < n; ++i) sum += widen(xr[i]) * widen(xr[i]);
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
    S* o = out + r * os + h * n;
    if (gemma)
      for (int64_t k = 0; k < n; ++k) o[k] = narrow<S>(widen(xr[k]) * inv * (1.0f + widen(weight[k])));
    else
      for (int64_t k = 0; k < n; ++k) o[k] = narrow<S>(widen(weight[k]) * round_as<S>(widen(xr[k]) * inv));
  }
}

// In place, the first `heads` heads of each row (queries, then keys): x * cos + rotate_half(x) * sin.
template <typename S>
void rope(S* x, int64_t xs, const S* cos, const S* sin, int64_t rows, int64_t heads, int64_t dim, int threads) {
  const int64_t half = dim / 2;
#pragma omp parallel for num_threads(threads) if (rows * heads * dim >= PARALLEL)
  for (int64_t r = 0; r < rows; ++r) {
    const S *c = cos + r * dim, *s = sin + r * dim;
    for (int64_t h = 0; h < heads; ++h) {
      S* v = x + r * xs + h * dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = widen(v[i]), b = widen(v[i + half]);
        v[i] = narrow<S>(round_as<S>(a * widen(c[i])) + round_as<S>(-b * widen(s[i])));
        v[i + half] = narrow<S>(round_as<S>(b * widen(c[i + half])) + round_as<S>(a * widen(s[i + half])));
      }
    }
  }
}

// The MLP's activations, as act_mul's `act` names them.
enum Activation : int { SILU = 0, GELU_TANH = 1 };

template <Activation A> inline float activate(float x) {
  if constexpr (A == SILU) {
    const float e = exp_nonpositive(-std::fabs(x));  // sigmoid without overflow
    return x * (x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e));
  } else {  // torch's gelu(approximate="tanh")
    return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  }
}

// out[r] = act(gate) * up, for rows [gate | up] of width 2n, gs apart.
template <typename S, Activation A>
void act_mul(S* out, const S* gate_up, int64_t gs, int64_t rows, int64_t n, int threads) {
#pragma omp parallel for num_threads(threads) if (rows * n >= PARALLEL)
  for (int64_t r = 0; r < rows; ++r) {
    const S *g = gate_up + r * gs, *u = g + n;
    S* o = out + r * n;
    for (int64_t i = 0; i < n; ++i) o[i] = narrow<S>(round_as<S>(activate<A>(widen(g[i]))) * widen(u[i]));
  }
}

template <typename S>
int act_mul(S* out, const S* gate_up, int64_t gs, int64_t rows, int64_t n, int act, int threads) {
  switch (act) {
    case SILU: act_mul<S, SILU>(out, gate_up, gs, rows, n, threads); return 0;
    case GELU_TANH: act_mul<S, GELU_TANH>(out, gate_up, gs, rows, n, threads); return 0;
    default: return -1;
  }
}

}  // namespace

#define ENTRIES(suffix, S)                                                                                          \
  extern "C" void fucina_rms_norm_##suffix(void* out, int64_t os, void* x, int64_t xs, const void* residual,       \
                                           int64_t rs, const void* weight, int64_t rows, int64_t heads, int64_t n,  \
                                           double eps, int gemma, int threads) {                                     \
    rms_norm<S>(static_cast<S*>(out), os, static_cast<S*>(x), xs, static_cast<const S*>(residual), rs,              \
                static_cast<const S*>(weight), rows, heads, n, static_cast<float>(eps), gemma != 0, threads);       \
  }                                                                                                                 \
  extern "C" void fucina_rope_##suffix(void* x, int64_t xs, const void* cos, const void* sin, int64_t rows,         \
                                       int64_t heads, int64_t dim, int threads) {                                   \
    rope<S>(static_cast<S*>(x), xs, static_cast<const S*>(cos), static_cast<const S*>(sin), rows, heads, dim,       \
            threads);                                                                                               \
  }                                                                                                                 \
  extern "C" int fucina_act_mul_##suffix(void* out, const void* gate_up, int64_t gs, int64_t rows, int64_t n,      \
                                         int act, int threads) {                                                    \
    return act_mul<S>(static_cast<S*>(out), static_cast<const S*>(gate_up), gs, rows, n, act, threads);             \
  }
ENTRIES(f32, float)
ENTRIES(bf16, BF16)
