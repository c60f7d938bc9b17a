// Host helpers of the torch-free device harness (tools/v3check): error
// checks, a small deterministic RNG, fp8 encoding, uploads and the
// command-line parsing of variant lists and key=value options.
// Development only: never part of the extension.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                             \
    }                                                                                           \
  } while (0)

namespace harness {

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  double uni() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  double gauss() {
    double u = uni(), v = uni();
    if (u < 1e-300) u = 1e-300;
    return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

inline uint8_t fp8(double x) { return __nv_fp8_e4m3(static_cast<float>(x)).__x; }

template <class T>
T* upload(const std::vector<T>& v) {
  T* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(16, v.size() * sizeof(T))));
  if (!v.empty()) CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

// A workload's inputs (q, k, scales, weights, starts, ends) into the device
// struct's fields of the same names.
template <class W, class D>
void upload_inputs(const W& w, D& d) {
  d.q = upload(w.q), d.k = upload(w.k), d.scales = upload(w.scales), d.weights = upload(w.weights);
  d.starts = upload(w.starts), d.ends = upload(w.ends);
}

// "12,13,15" -> {12, 13, 15}
inline std::vector<int> parse_variants(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

// The value of a "name=N" argument, else dflt.
inline int opt_int(int argc, char** argv, const char* name, int dflt) {
  const size_t n = std::strlen(name);
  for (int i = 1; i < argc; ++i)
    if (!std::strncmp(argv[i], name, n) && argv[i][n] == '=') return std::atoi(argv[i] + n + 1);
  return dflt;
}

}  // namespace harness
