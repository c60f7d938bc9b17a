// Microbenchmark of the split merge's gather + output pass (issue 12; dev
// only, torch-free). The op's last piece of a split block selects each row
// over every piece's published candidates: pair_finish_row_prebinned
// (fused_select.cuh) with the pieces' summed bins. Inside the fused kernel its
// one gather + output pass took 37-55K cycles per row (session 18, variant 67
// probe 7) for ~3.5K candidates in ~4 load steps per lane. This harness runs
// the same code on synthetic pieces (the op's PieceSegs layout, 8 rows per
// CTA as the op's pairs: 16 warps) alone on the GPU, and times variants of the
// pass taken apart (loads only, + ballots, + scratch stores, + output stores,
// staged output) with clock64, per row; the full variants are checked against
// a sorting reference on the host.
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Icsrc/include \
//     tools/gatherbench/gatherbench.cu -o build/gatherbench
//   build/gatherbench            (prints one line per configuration and variant)
#include "../harness_common.h"  // (CK, harness::Rng)
#include "mqa_topk/fused_select.cuh"

using namespace mqa_topk::fused_detail;

constexpr int kRows = 8;  // rows per CTA (the op's block)
constexpr int kSegsPerRow = 8;

struct Params {
  const uint32_t* ws;   // PieceSegs layout (kPieceSlots regions of 8 rows x 8 segments x 2 cap per CTA)
  const uint32_t* cnt;  // counts: (c * kPieceSlots + slot) * 256 + r * 32 + segment
  uint32_t cap;
  int np, k;
  const uint32_t* gk;    // per row: the gate key
  const uint32_t* smax;  // per row: the bins' top key
  int* out;
  unsigned long long* cyc;  // [0] pass cycles, [1] rows timed, [2] whole-select cycles, [3] skipped rows
  uint32_t* sink;
};

// The op's gather + output pass (pair_row_core's last pass, binned, kEmit,
// gather) with parts switched off. kMode 0: loads only; 1: + ballots and
// positions; 2: + the scratch stores; 3: + the output stores (the op's old
// pass); 4: the op's pass since 2026-12-04.
// kL: lanes per segment (0: the op's choice by piece count; -1: piece_flat).
template <int kMode, int kL, int kG, class Out>
__device__ __forceinline__ void gather_pass(const PieceSegs& s, const PairCtx& pc, uint32_t tk1, uint32_t l0,
                                            uint32_t s0, uint32_t m0, uint32_t sl, uint32_t above, uint32_t c,
                                            uint32_t* sk, uint32_t* si, int lane, Out&& out, uint32_t* hp,
                                            uint32_t* gp, uint32_t* gmn, uint32_t* gmx, uint32_t* acc) {
  const uint32_t lt = (1u << lane) - 1u;
  uint32_t hpos = 0, gpos = 0, gmin = 0xffffffffu, gmax = 0, a = 0;
  // kMode 4: the op's new body (keys against the bin's bounds, one ballot)
  const BinBounds bb = bin_bounds(l0, s0, m0, sl, true);  // (the op's bounds, fused_select.cuh)
  const uint32_t hs = pc.half == 0 ? 1u : 0xffffffffu;
  uint32_t hb = pc.half == 0 ? 0u : above - 1u, gb = pc.half == 0 ? 0u : c - 1u;
  auto f = [&](uint32_t key, uint32_t idx, bool valid) {
    if constexpr (kMode == 4) {
      const bool hi = valid && key - bb.khi < bb.hspan;
      const uint32_t mh = __ballot_sync(0xffffffffu, hi);
      const uint32_t at = hb + hs * static_cast<uint32_t>(__popc(mh & lt));
      if (hi && at < above) out(static_cast<int>(at), static_cast<int>(idx), key);
      hb += hs * static_cast<uint32_t>(__popc(mh));
      const bool eq = valid && key - bb.klo < bb.espan;
      if (__any_sync(0xffffffffu, eq)) {
        const uint32_t me = __ballot_sync(0xffffffffu, eq);
        if (eq) {
          const uint32_t at2 = gb + hs * static_cast<uint32_t>(__popc(me & lt));
          if (at2 < c) {
            sk[at2] = key;
            si[at2] = idx;
          }
          gmin = min(gmin, key);
          gmax = max(gmax, key);
        }
        gb += hs * static_cast<uint32_t>(__popc(me));
      }
    } else if constexpr (kMode == 0) {
      a ^= valid ? key ^ idx : 0u;
    } else {
      const uint32_t d = key - l0;
      const bool el = valid && key >= tk1;
      const bool in = el && d <= s0;
      const uint32_t bn = range_bin(key, l0, m0);
      const bool eq = in && bn == sl;
      const bool hi = el && (d > s0 ? key > l0 : bn > sl);
      const uint32_t mh = __ballot_sync(0xffffffffu, hi);
      const uint32_t me = __ballot_sync(0xffffffffu, eq);
      if (hi) {
        const uint32_t r = hpos + __popc(mh & lt);
        const uint32_t at = pc.half == 0 ? r : above - 1u - r;
        if constexpr (kMode >= 3) {
          if (at < above) out(static_cast<int>(at), static_cast<int>(idx), key);
        } else {
          a += at;
        }
      }
      if (eq) {
        const uint32_t r = gpos + __popc(me & lt);
        const uint32_t at = pc.half == 0 ? r : c - 1u - r;
        if constexpr (kMode >= 2) {
          if (at < c) {
            sk[at] = key;
            si[at] = idx;
          }
        } else {
          a += at;
        }
      }
      gmin = min(gmin, eq ? key : 0xffffffffu);
      gmax = max(gmax, eq ? key : 0u);
      hpos += __popc(mh);
      gpos += __popc(me);
    }
  };
  if constexpr (kL == 0) piece_each<true, kG>(s, lane, f);
  else if constexpr (kL < 0) piece_flat<true, kG>(s, lane, f);
  else piece_rounds<true, kG, kL>(s, lane, f);
  if constexpr (kMode == 4) {
    hpos = pc.half == 0 ? hb : above - 1u - hb;
    gpos = pc.half == 0 ? gb : c - 1u - gb;
  }
  *hp = hpos;
  *gp = gpos;
  *gmn = gmin;
  *gmx = gmax;
  *acc = a;
}

// Variant 0: the op's pair_finish_row_prebinned (the gather pass timed by its
// marks). Variants 1-4: gather_pass kMode 0-3 (op's lane choice); 5: kMode 3
// with the output staged in shared memory and copied out after the select; 6:
// kMode 3 with 8 lanes per segment (piece by piece); 7: kMode 3 with 2 key /
// index groups per step; 8: kMode 3, one lane per segment; 9: kMode 4 (the
// new body: keys against the bin's bounds); 10: kMode 4 over piece_flat; 11:
// loads only over piece_flat; 12: 10 with 2 groups per step.
template <int V>
__global__ void __launch_bounds__(512, 1) gather_kernel(Params p) {
  extern __shared__ uint32_t sm[];
  const int tid = threadIdx.x, lane = tid & 31;
  const int wg = tid / 128, kg = wg & 1, r = 4 * (wg >> 1) + ((tid >> 5) & 3);
  uint32_t* hist = sm + r * 256;
  uint32_t* sk = sm + 2048 + r * 256;
  uint32_t* si = sm + 4096 + r * 256;
  uint32_t* xch = sm + 6144 + r * 16;
  int* stage = reinterpret_cast<int*>(sm + 6144 + 128) + r * p.k;
  for (int i = tid; i < 6144 + 128; i += blockDim.x) sm[i] = 0;
  __syncthreads();
  PieceSegs ps;
  ps.base = p.ws + size_t(r * kSegsPerRow) * 2u * p.cap;
  ps.cnt = p.cnt + r * 32;
  ps.cap = p.cap;
  ps.c0 = blockIdx.x * p.np;
  ps.slot0 = 0;
  ps.np = p.np;
  ps.half = kg;
  PairCtx pc{xch, 8 + r, kg, 0};
  const int row = blockIdx.x * kRows + r;
  const uint32_t gk = p.gk[row], M = p.smax[row];
  const uint64_t thr = gate_threshold(gk);
  const uint32_t k = static_cast<uint32_t>(p.k);
  int* orow = p.out + size_t(row) * k;
  const bool timer = lane == 0;
  pair_count_gate_bins(ps, pc, gk, M, hist, lane);  // (as the op's summed published bins)
  if constexpr (V == 0) {
    long long tk[4] = {0, 0, 0, 0};
    auto mark = [&](int i) { tk[i] = clock64(); };
    uint32_t cands = 0;
    auto out = [&](int at, int v, uint32_t) { orow[at] = v; };
    const long long t0 = clock64();
    const int res = pair_finish_row_prebinned(ps, pc, thr, M, k, k, true, 0, hist, sk, si, lane, &cands, out, mark);
    const long long t1 = clock64();
    if (timer) {
      atomicAdd(p.cyc + 0, static_cast<unsigned long long>(tk[2] - tk[1]));
      atomicAdd(p.cyc + 1, 1ull);
      atomicAdd(p.cyc + 2, static_cast<unsigned long long>(t1 - t0));
      if (res <= 0) atomicAdd(p.cyc + 3, 1ull);
    }
    return;
  } else {
    // pair_row_core's fast path up to its gather pass
    uint32_t tot = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) tot += hist[j * 32 + lane];
    const uint32_t call = __reduce_add_sync(0xffffffffu, tot);
    uint32_t before = 0, in_bin = 0, sel = 255u;
    if (call > k) sel = warp_find_digit_t<false>(hist, k, true, &before, &in_bin, lane);
    pair_sync(pc.bar);
#pragma unroll
    for (int j = 0; j < 4; ++j) hist[pc.half * 128 + lane * 4 + j] = 0;
    if (call <= k || sel == 255u || in_bin > static_cast<uint32_t>(kScratch)) {  // (not this harness's case)
      if (timer) atomicAdd(p.cyc + 3, 1ull);
      return;
    }
    const uint32_t l0 = gk, s0 = M - gk, m0 = range_mult(s0), above = before, c = in_bin;
    uint32_t hpos, gpos, gmin, gmax, acc;
    auto out_g = [&](int at, int v, uint32_t) { orow[at] = v; };
    auto out_s = [&](int at, int v, uint32_t) { stage[at] = v; };
    pair_sync(pc.bar);
    const long long t0 = clock64();
    if constexpr (V >= 1 && V <= 4)
      gather_pass<V - 1, 0, 4>(ps, pc, gk, l0, s0, m0, sel, above, c, sk, si, lane, out_g, &hpos, &gpos, &gmin, &gmax,
                               &acc);
    else if constexpr (V == 5)
      gather_pass<3, 0, 4>(ps, pc, gk, l0, s0, m0, sel, above, c, sk, si, lane, out_s, &hpos, &gpos, &gmin, &gmax,
                           &acc);
    else if constexpr (V == 6)
      gather_pass<3, 8, 4>(ps, pc, gk, l0, s0, m0, sel, above, c, sk, si, lane, out_g, &hpos, &gpos, &gmin, &gmax,
                           &acc);
    else if constexpr (V == 7)
      gather_pass<3, 0, 2>(ps, pc, gk, l0, s0, m0, sel, above, c, sk, si, lane, out_g, &hpos, &gpos, &gmin, &gmax,
                           &acc);
    else if constexpr (V == 8)
      gather_pass<3, 1, 4>(ps, pc, gk, l0, s0, m0, sel, above, c, sk, si, lane, out_g, &hpos, &gpos, &gmin, &gmax,
                           &acc);
    else if constexpr (V == 9)
      gather_pass<4, 0, 4>(ps, pc, gk, l0, s0, m0, sel, above, c, sk, si, lane, out_g, &hpos, &gpos, &gmin, &gmax,
                           &acc);
    else if constexpr (V == 10)
      gather_pass<4, -1, 4>(ps, pc, gk, l0, s0, m0, sel, above, c, sk, si, lane, out_g, &hpos, &gpos, &gmin, &gmax,
                            &acc);
    else if constexpr (V == 11)
      gather_pass<0, -1, 4>(ps, pc, gk, l0, s0, m0, sel, above, c, sk, si, lane, out_g, &hpos, &gpos, &gmin, &gmax,
                            &acc);
    else
      gather_pass<4, -1, 2>(ps, pc, gk, l0, s0, m0, sel, above, c, sk, si, lane, out_g, &hpos, &gpos, &gmin, &gmax,
                            &acc);
    const long long t1 = clock64();
    if (timer) {
      atomicAdd(p.cyc + 0, static_cast<unsigned long long>(t1 - t0));
      atomicAdd(p.cyc + 1, 1ull);
    }
    if (acc == 0x9e3779b9u) p.sink[0] = acc;  // (keeps the loads-only pass)
    if constexpr (V < 4 || V == 11) return;
    // the rest of pair_row_core: the bin's winners after the entries above it
    const uint4 q = pair_exchange(pc, make_uint4(hpos, gpos, 0u, 0u), lane);
    if (hpos + q.x != above || gpos + q.y != c) {
      if (timer) atomicAdd(p.cyc + 3, 1ull);
      return;
    }
    gmin = __reduce_min_sync(0xffffffffu, gmin);
    gmax = __reduce_max_sync(0xffffffffu, gmax);
    const uint4 q2 = pair_exchange(pc, make_uint4(gmin, gmax, 0u, 0u), lane);
    if (pc.half == 0) {
      const uint64_t t = finish_in_scratch(sk, si, c, min(gmin, q2.x), max(gmax, q2.y), k - above, hist, lane);
      const uint32_t lt = (1u << lane) - 1u;
      uint32_t pos = above;
      for (uint32_t j0 = 0; j0 < c; j0 += 32) {
        const uint32_t j = j0 + static_cast<uint32_t>(lane);
        const bool keep = j < c && composite(sk[j], si[j]) >= t;
        const uint32_t m = __ballot_sync(0xffffffffu, keep);
        const uint32_t at = pos + __popc(m & lt);
        if (keep && at < k) {
          if constexpr (V == 5) stage[at] = static_cast<int>(si[j]);
          else orow[at] = static_cast<int>(si[j]);
        }
        pos += __popc(m);
      }
      __syncwarp();
    }
    if constexpr (V == 5) {
      pair_sync(pc.bar);
      for (int j = (pc.half * 32 + lane) * 4; j < p.k; j += 64 * 4)
        *reinterpret_cast<int4*>(orow + j) = *reinterpret_cast<const int4*>(stage + j);
    }
  }
}

static uint32_t order_key_h(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t m = 0u - (u >> 31);
  return ((u ^ m) - m) ^ (~m & 0x80000000u);
}

// A uniform double in (0, 1) (never 0: it feeds a logarithm).
static double uni_open(harness::Rng& rng) { return ((rng.next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

template <int V>
static void run(const Params& base, int B, size_t smem, const std::vector<std::vector<uint32_t>>& ref, int* d_out,
                unsigned long long* d_cyc, const char* what) {
  Params p = base;
  const size_t out_words = size_t(B) * kRows * p.k;
  CK(cudaFuncSetAttribute(gather_kernel<V>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  unsigned long long h[4] = {0, 0, 0, 0};
  for (int rep = 0; rep < 3; ++rep) {  // (the last of 3: L2 warm, clocks up)
    CK(cudaMemset(d_out, 0xff, out_words * 4));  // (poisoned)
    CK(cudaMemset(d_cyc, 0, 4 * sizeof(unsigned long long)));
    gather_kernel<V><<<B, 512, smem>>>(p);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d_cyc, sizeof(h), cudaMemcpyDeviceToHost));
  }
  int wrong = -1;
  if (V == 0 || (V >= 4 && V != 11)) {
    std::vector<int> out(out_words);
    CK(cudaMemcpy(out.data(), d_out, out_words * 4, cudaMemcpyDeviceToHost));
    wrong = 0;
    for (int row = 0; row < B * kRows; ++row) {
      std::vector<uint32_t> got(out.begin() + size_t(row) * p.k, out.begin() + size_t(row + 1) * p.k);
      std::sort(got.begin(), got.end());
      if (got != ref[row]) ++wrong;
    }
  }
  const double rows = h[1] ? static_cast<double>(h[1]) : 1.0;
  std::printf("  v%d %-34s pass %8.0f cycles/row", V, what, h[0] / rows);
  if (V == 0) std::printf("  (whole select %8.0f)", h[2] / rows);
  std::printf("  timed rows %llu, skipped %llu", h[1], h[3]);
  if (wrong >= 0) std::printf(", wrong rows %d", wrong);
  std::printf("\n");
}

int main(int argc, char** argv) {
  struct Cfg {
    int np, C, k, B;
  };
  std::vector<Cfg> cfgs = {{16, 3468, 2048, 8}, {16, 1096, 512, 8}, {4, 3459, 2048, 32}, {2, 3449, 2048, 64}};
  if (argc == 5) cfgs = {{std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4])}};
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  for (const Cfg& cf : cfgs) {
    const uint32_t cap = cf.np >= 8 ? 256u : 1024u;  // (room for every segment's entries)
    const int np = cf.np, B = cf.B, k = cf.k;
    const size_t regions = size_t(B) * np * kPieceSlots;
    std::vector<uint32_t> ws(regions * 64 * 2 * cap, 0u), cnt(regions * 256, 0u);
    std::vector<uint32_t> gk(size_t(B) * kRows), smax(size_t(B) * kRows);
    std::vector<std::vector<uint32_t>> ref(size_t(B) * kRows);
    harness::Rng rng(1234 + np * 7 + cf.C);
    for (int b = 0; b < B; ++b)
      for (int r = 0; r < kRows; ++r) {
        const int row = b * kRows + r;
        std::vector<std::pair<uint32_t, uint32_t>> all;
        for (int e = 0; e < cf.C; ++e) {
          const int pc = static_cast<int>(rng.next() % np), sg = static_cast<int>(rng.next() % kSegsPerRow);
          const size_t sl = size_t(b * np + pc) * kPieceSlots;
          uint32_t& n = cnt[sl * 256 + r * 32 + sg];
          if (n >= cap) continue;
          const float v = 5.0f + static_cast<float>(-std::log(uni_open(rng)));
          const uint32_t key = order_key_h(v), idx = static_cast<uint32_t>(pc * 8192 + sg * 1024) + n;
          uint32_t* seg = ws.data() + (sl * 64 + size_t(r * kSegsPerRow + sg)) * 2 * cap;
          seg[n] = key;
          seg[cap + n] = idx;
          ++n;
          all.push_back({key, idx});
        }
        std::sort(all.begin(), all.end(), [](auto& a, auto& b2) {
          return a.first != b2.first ? a.first > b2.first : a.second < b2.second;
        });
        gk[row] = order_key_h(5.0f);
        smax[row] = all[std::min<size_t>(19, all.size() - 1)].first;  // (a sample's maximum: a few keys above it)
        for (int j = 0; j < k; ++j) ref[row].push_back(j < static_cast<int>(all.size()) ? all[j].second : 0xffffffffu);
        std::sort(ref[row].begin(), ref[row].end());
      }
    uint32_t *d_ws, *d_cnt, *d_gk, *d_smax, *d_sink;
    int* d_out;
    unsigned long long* d_cyc;
    CK(cudaMalloc(&d_ws, ws.size() * 4));
    CK(cudaMalloc(&d_cnt, cnt.size() * 4));
    CK(cudaMalloc(&d_gk, gk.size() * 4));
    CK(cudaMalloc(&d_smax, smax.size() * 4));
    CK(cudaMalloc(&d_sink, 4));
    CK(cudaMalloc(&d_out, size_t(B) * kRows * k * 4));
    CK(cudaMalloc(&d_cyc, 4 * sizeof(unsigned long long)));
    CK(cudaMemcpy(d_ws, ws.data(), ws.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_cnt, cnt.data(), cnt.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_gk, gk.data(), gk.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_smax, smax.data(), smax.size() * 4, cudaMemcpyHostToDevice));
    Params p{d_ws, d_cnt, cap, np, k, d_gk, d_smax, d_out, d_cyc, d_sink};
    const size_t smem = (6144 + 128) * 4 + size_t(kRows) * k * 4;
    std::printf("np %d, candidates per row %d, top-%d, %d CTAs of 8 rows\n", np, cf.C, k, B);
    run<0>(p, B, smem, ref, d_out, d_cyc, "op: pair_finish_row_prebinned");
    run<1>(p, B, smem, ref, d_out, d_cyc, "loads only");
    run<2>(p, B, smem, ref, d_out, d_cyc, "+ ballots, positions");
    run<3>(p, B, smem, ref, d_out, d_cyc, "+ scratch stores");
    run<4>(p, B, smem, ref, d_out, d_cyc, "+ output stores (op's pass)");
    run<5>(p, B, smem, ref, d_out, d_cyc, "output staged in smem");
    run<6>(p, B, smem, ref, d_out, d_cyc, "8 lanes per segment");
    run<7>(p, B, smem, ref, d_out, d_cyc, "2 groups per step");
    run<8>(p, B, smem, ref, d_out, d_cyc, "1 lane per segment");
    run<9>(p, B, smem, ref, d_out, d_cyc, "new body, op's traversal");
    run<10>(p, B, smem, ref, d_out, d_cyc, "new body, flat traversal");
    run<11>(p, B, smem, ref, d_out, d_cyc, "loads only, flat traversal");
    run<12>(p, B, smem, ref, d_out, d_cyc, "new body, flat, 2 groups");
    CK(cudaFree(d_ws));
    CK(cudaFree(d_cnt));
    CK(cudaFree(d_gk));
    CK(cudaFree(d_smax));
    CK(cudaFree(d_sink));
    CK(cudaFree(d_out));
    CK(cudaFree(d_cyc));
  }
  return 0;
}
