// What this package's C++ kernels share: vectors, an exp, and bfloat16 kept as bits and computed in
// float32. Built by fucina_jobs/native, which lists the kernels.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace fucina {

// Vectors as wide as the machine's registers. On AVX-512 hosts 32-byte ones measured 4-7% slower a
// step; on AVX2 hosts 64-byte ones spill registers, and attention ran 3.5-8x slower than with 32-byte
// ones (docs/BENCHMARKS.md, "Kernel vector width").
#if defined(__AVX512F__)
constexpr int VECTOR_BYTES = 64;
#else
constexpr int VECTOR_BYTES = 32;
#endif
template <typename T> struct Vec { typedef T type __attribute__((vector_size(VECTOR_BYTES))); };
template <typename T> using V = typename Vec<T>::type;
template <typename T> constexpr int LANES = VECTOR_BYTES / sizeof(T);

template <typename T> inline V<T> load(const T* p) { V<T> v; std::memcpy(&v, p, sizeof v); return v; }
template <typename T> inline void store(T* p, V<T> v) { std::memcpy(p, &v, sizeof v); }

// exp(x) for x <= 0 as 2^n * p(r), |r| <= ln2 / 2, a degree-6 polynomial (about 2 ulp); 0 below -87,
// where float32's exp is already under its smallest normal. Branch-free, so its loop vectorises.
inline float exp_nonpositive(float x) {
  const bool gone = x < -87.0f;
  x = gone ? -87.0f : x;
  const float n = std::nearbyint(x * 1.44269504088896341f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return gone ? 0.0f : p * scale;
}
inline double exp_nonpositive(double x) { return std::exp(x); }

// bfloat16 is stored as its bits and computed in float32; float32 and float64 compute in themselves.
struct BF16 { uint16_t bits; };
template <typename S> struct Compute { using type = S; };
template <> struct Compute<BF16> { using type = float; };
template <typename T> inline T widen(T x) { return x; }
inline float widen(BF16 x) {
  const uint32_t bits = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
template <typename S, typename T> inline S narrow(T x) { return x; }
template <> inline BF16 narrow<BF16, float>(float x) {  // round to nearest even, as torch does
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return BF16{static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16)};
}

// A value rounded as S stores it, kept in S's compute type: where torch rounds to bfloat16 between two
// ops, so do the fused kernels.
template <typename S, typename T> inline T round_as(T x) { return widen(narrow<S>(x)); }

}  // namespace fucina
