// sm90_fused_mqa_topk: one launch computes the FP8 MQA logits of every visible
// (row, key) pair tile by tile and keeps each row's exact top-k on the fly; the
// logits never reach memory. Hopper (sm_90a), torch-free.
//
// Logits: the dense kernel's main loop and epilogue arithmetic
// (sm90_fp8_mqa_logits.cuh: 8-row blocks = wgmma N 256, keys as the A operand,
// 64 keys per math warpgroup, producer warpgroup + K/scales TMA ring,
// `logits_epilogue_reduce`, `x * (0.5 * scale)`), so every logit is bitwise
// equal to the dense kernel's and the two paths select identical index sets.
//
// Selection (warp-level pieces in fused_select.cuh, tested off-GPU on the warp
// emulator in tests/emu/) per row; order = composite (value desc, index asc), value compared
// through the order-preserving key of sm90_topk_per_row, -0.0 == +0.0):
// - Each math warpgroup appends the logits of its 64 keys per tile that beat
//   the row's running threshold to its own candidate buffer of the row (global
//   workspace, per CTA, L2-resident): (order key, absolute index) pairs,
//   capacity `cap` = 3k + 128. Slots are given in a fixed order (tile, warp,
//   key half, lane) through one per-warpgroup exchange of per-warp counts, so
//   buffer contents, and everything after, are deterministic.
// - When a row's buffer could overflow on the next tile (count > cap - 64),
//   one warp per row selects (`warp_select`): one vector pass finds the range
//   and count of the entries whose key is at or above the running threshold's,
//   a histogram over 256 equal slices of that range finds the slice of the
//   k-th (refined inside the slice while it holds more than 256 entries), the
//   slice is gathered into shared memory and finished there by radix passes
//   over the bits that still differ; heavy ties (one key) go to radix passes
//   over the indices. Then a stable in-place pass keeps the top k (or, when
//   at most k entries reach the threshold, just those) and the row's shared
//   threshold rises to the k-th composite. That threshold is always the k-th
//   largest composite of a subset of the row, so no element of the row's
//   top-k is ever dropped (SPEC §6); both warpgroups filter with it.
// - At the end of a block both warpgroups meet; warp w merges row w's two
//   buffers (the same select over both) and writes the top min(k, n) relative
//   indices in buffer order, then -1 padding.
// - Key tiles of a block are visited in a scrambled order (a golden-ratio
//   stride coprime to the tile count, last tile first), so scores rising with
//   position do not keep the threshold low.
// Cost bounds: a select costs O(count) (a bounded number of passes) and runs
// only after >= k + 64 new candidates (or once per row at the block end), so
// even when every logit beats the threshold selection work stays linear in
// the row length: at most one select per (k + 64) / 64 tiles per row and
// warpgroup.
// Work: blocks are handed out by a global counter (largest row index first:
// causal blocks are longest last) to a persistent grid of one CTA per SM.
// Workspace: a 64-byte header (the block counter and development statistics,
// zeroed before the launch) + num_sms x 2 x 8 x 2 x cap x 4 bytes (101.1 MiB for k = 2048 on 132 SMs, 26.8 MiB for k = 512).
#pragma once

#include "fused_select.cuh"
#include "sm90_fp8_mqa_logits.cuh"

namespace mqa_topk {

struct Sm90FusedParams {
  const int* starts;
  const int* ends;
  int* out;          // [rows, topk]
  uint32_t* ws;      // candidate buffers, num_sms x 2 x 8 x 2 x cap
  int* counter;      // block counter, zero at launch
  int rows;
  int keys;
  int topk;
  int cap;           // candidates per (warpgroup, row) buffer: 3 * topk + 128
  int probe;         // development only: 1 = never append (logits + filter alone), 2 = real + statistics
  RangeErrorSink err;  // bad rows are recorded here (range_check.cuh; null: not recorded)
};

// kLeanSelect (development, dev probe variant 1): warp_select_lean instead of
// warp_select (same results; branch-free passes). Not yet measured on a GPU.
// kWindow (development, dev probe variant 2; implies the lean select): keep
// each warpgroup-row's candidates binned in a window histogram at append time
// so a compaction is one pass (fused_select.cuh: warp_compact_window).
template <int kNumStages_, bool kLeanSelect_ = false, bool kWindow_ = false>
struct Sm90FusedConfig {
  static constexpr bool kLeanSelect = kLeanSelect_ || kWindow_;
  static constexpr bool kWindow = kWindow_;
  using Logits = Sm90LogitsConfig<8, 2, kNumStages_>;
  static constexpr int kBlockRows = 8;
  static constexpr int kNumStages = kNumStages_;
  static constexpr int kMathWarpgroups = 2;
  static constexpr int kThreads = 384;
  static constexpr int kMathThreads = 256;
  static constexpr int kBlockKeys = Logits::kBlockKeys;  // 128
  static constexpr int kOffK = 0;
  static constexpr int kOffQ = kOffK + kNumStages * Logits::kKTileBytes;
  static constexpr int kOffScales = kOffQ + 2 * Logits::kQTileBytes;
  static constexpr int kOffWeights = kOffScales + kNumStages * Logits::kScaleBytes;
  static constexpr int kOffHist = kOffWeights + 2 * Logits::kWeightBytes;   // 8 warps x 256 bins
  static constexpr int kOffWc = kOffHist + 8 * 256 * 4;                     // [2 parity][2 wg][4 warps][8 rows]
  static constexpr int kOffCnt = kOffWc + 2 * 2 * 4 * 8 * 4;                // [2 wg][8 rows]
  static constexpr int kOffThr = kOffCnt + 2 * 8 * 4;                       // [8 rows] u64
  static constexpr int kOffScratch = kOffThr + 8 * 8;                       // 8 warps x kScratch x (key, idx)
  static constexpr int kOffWin = kOffScratch + 8 * 256 * 2 * 4;             // kWindow: [2 wg][8 rows] lo, span, mult, valid
  static constexpr int kOffWhist = kOffWin + (kWindow ? 2 * 8 * 16 : 0);    // kWindow: [2 wg][8 rows][256]
  static constexpr int kOffSlot = kOffWhist + (kWindow ? 2 * 8 * 256 * 4 : 0);  // [2] int4: block, lo, nt, stride
  static constexpr int kOffBars = kOffSlot + 2 * 16;
  static constexpr int kNumBars = 2 * kNumStages + 4;
  static constexpr int kSmemBytes = kOffBars + kNumBars * 8 + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
};

// Candidate capacity per (warpgroup, row) buffer for a given k.
__host__ __device__ constexpr int fused_candidate_cap(int topk) { return 3 * topk + 128; }

// Workspace header: the block counter (int) and, for development probe 2,
// seven u64 statistics (see scripts/fused_probe.py).
constexpr int kFusedHeaderBytes = 64;

// Candidate-buffer words per CTA, in units of the capacity: 2 warpgroups x 8
// rows x (key, index).
constexpr int kFusedWordsPerCap = 2 * 8 * 2;

// Bytes of workspace the fused kernel needs (header first).
inline size_t fused_workspace_bytes(int topk, int num_sms) {
  return kFusedHeaderBytes + size_t(num_sms) * kFusedWordsPerCap * size_t(fused_candidate_cap(topk)) * 4;
}


template <bool kLean>
__device__ __forceinline__ uint64_t select_row(const fused_detail::Segs& s, uint64_t thr, uint32_t k, uint32_t* hist,
                                               uint32_t* sk, uint32_t* si, int lane) {
  if constexpr (kLean) return fused_detail::warp_select_lean(s, thr, k, hist, sk, si, lane);
  else return fused_detail::warp_select(s, thr, k, hist, sk, si, lane);
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_fused_mqa_topk_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                               const __grid_constant__ CUtensorMap tm_scales,
                               const __grid_constant__ CUtensorMap tm_weights, const Sm90FusedParams p) {
  using L = typename Cfg::Logits;
  using namespace fused_detail;
  constexpr int S = Cfg::kNumStages;
  constexpr int R = 8;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBars);
  uint64_t* full = bars;
  uint64_t* empty = bars + S;
  uint64_t* q_full = bars + 2 * S;
  uint64_t* q_empty = bars + 2 * S + 2;
  uint32_t* hist_all = reinterpret_cast<uint32_t*>(smem + Cfg::kOffHist);
  uint32_t* wc = reinterpret_cast<uint32_t*>(smem + Cfg::kOffWc);
  uint32_t* cnt_s = reinterpret_cast<uint32_t*>(smem + Cfg::kOffCnt);
  unsigned long long* thr = reinterpret_cast<unsigned long long*>(smem + Cfg::kOffThr);
  volatile unsigned long long* thr_v = thr;  // read while the other warpgroup may raise it
  volatile int* slot = reinterpret_cast<volatile int*>(smem + Cfg::kOffSlot);  // [2][4]

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  if (tid == 0) init_pipeline_barriers<S, Cfg::kMathThreads / 32>(full, empty, q_full, q_empty);
  for (int i = tid; i < 8 * 256; i += Cfg::kThreads) hist_all[i] = 0;
  [[maybe_unused]] uint32_t* win_s = reinterpret_cast<uint32_t*>(smem + Cfg::kOffWin);     // kWindow only
  [[maybe_unused]] uint32_t* whist_s = reinterpret_cast<uint32_t*>(smem + Cfg::kOffWhist); // kWindow only
  if constexpr (Cfg::kWindow) {
    for (int i = tid; i < 2 * 8 * 256; i += Cfg::kThreads) whist_s[i] = 0;
    for (int i = tid; i < 2 * 8 * 4; i += Cfg::kThreads) win_s[i] = 0;  // valid = 0
  }
  if (tid < R) thr[tid] = 0;
  __syncthreads();

  const int nblocks = (p.rows + R - 1) / R;
  if (wg == Cfg::kMathWarpgroups) {
    // ---------------- producer: one thread takes blocks and issues every TMA ----------------
    if (tid != Cfg::kMathThreads) {  // idle; warps 1-3 check the row ranges (range_check.cuh)
      check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelFused,
                       range_checker_index(tid, Cfg::kMathThreads + 32, 96), gridDim.x * 96);
      return;
    }
    ptx::prefetch_tensor_map(&tm_q);
    ptx::prefetch_tensor_map(&tm_k);
    ptx::prefetch_tensor_map(&tm_scales);
    ptx::prefetch_tensor_map(&tm_weights);
    int it = 0;
    const Sm90LogitsParams lp{p.starts, p.ends, nullptr, 0, p.rows, p.keys};
    for (int qi = 0;; ++qi) {
      const int qb = qi & 1;
      ptx::mbar_wait(q_empty + qb, ((qi >> 1) & 1) ^ 1);
      // Claim the next block only once its Q buffer is free (one block ahead).
      const int w = atomicAdd(p.counter, 1);
      if (w >= nblocks) {
        slot[4 * qb] = -1;
        ptx::mbar_arrive(q_full + qb);
        return;
      }
      const int b = nblocks - 1 - w;
      int lo, hi;
      const int nt = block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi);
      const int stride = tile_stride(nt);
      slot[4 * qb + 0] = b;
      slot[4 * qb + 1] = lo;
      slot[4 * qb + 2] = nt;
      slot[4 * qb + 3] = stride;
      if (nt == 0) {  // every row empty: the consumers only write -1
        ptx::mbar_arrive(q_full + qb);
        continue;
      }
      ptx::mbar_arrive_expect_tx(q_full + qb, L::kQTileBytes + L::kWeightBytes);
      ptx::tma_load_2d(smem + Cfg::kOffQ + qb * L::kQTileBytes, &tm_q, q_full + qb, 0, b * R * L::kHeads);
      ptx::tma_load_2d(smem + Cfg::kOffWeights + qb * L::kWeightBytes, &tm_weights, q_full + qb, 0, b * R);
      for (int t = 0, tp = nt - 1; t < nt; ++t, ++it, tp = next_tile(tp, nt, stride)) {
        const int stage = it % S;
        ptx::mbar_wait(empty + stage, ((it / S) & 1) ^ 1);
        ptx::mbar_arrive_expect_tx(full + stage, L::kKTileBytes + L::kScaleBytes);
        const int key0 = lo + tp * Cfg::kBlockKeys;
        ptx::tma_load_2d(smem + Cfg::kOffK + stage * L::kKTileBytes, &tm_k, full + stage, 0, key0);
        ptx::tma_load_2d(smem + Cfg::kOffScales + stage * L::kScaleBytes, &tm_scales, full + stage, key0, 0);
      }
    }
  }

  // ---------------- math warpgroups ----------------
  constexpr int RQ = 2;
  const int lane = tid & 31;
  const int warp_in_wg = (tid >> 5) & 3;
  const int gwarp = tid >> 5;  // 0..7
  const int quad = lane & 3;
  const int key_local = warp_in_wg * 16 + (lane >> 2);
  const uint32_t qmask = 0x11111111u << quad;
  const uint32_t lt_mask = (1u << lane) - 1u;
  uint32_t* hist = hist_all + gwarp * 256;
  uint32_t* sk = reinterpret_cast<uint32_t*>(smem + Cfg::kOffScratch) + gwarp * 2 * fused_detail::kScratch;
  uint32_t* si = sk + fused_detail::kScratch;
  const int cap = p.cap, k = p.topk;
  // Rows compacted when one overflows: those at least (cap - k) / 2 past k, so
  // every select removes >= (k + 128) / 2 entries.
  const uint32_t compact_above = static_cast<uint32_t>(k + (cap - k) / 2);
  // This CTA's candidate buffers: [wg][row][key | idx][cap].
  uint32_t* ws_cta = p.ws + size_t(blockIdx.x) * kFusedWordsPerCap * size_t(cap);
  auto buf_key = [&](int w, int r) { return ws_cta + size_t((w * 8 + r) * 2) * cap; };
  auto buf_idx = [&](int w, int r) { return ws_cta + size_t((w * 8 + r) * 2 + 1) * cap; };

  unsigned long long* stats = reinterpret_cast<unsigned long long*>(p.counter) + 1;
  const long long t_start = clock64();
  int it = 0;
  for (int qi = 0;; ++qi) {
    const int qb = qi & 1;
    ptx::mbar_wait(q_full + qb, (qi >> 1) & 1);
    const int b = slot[4 * qb];
    if (b < 0) {
      if (p.probe == 2 && lane == 0) atomicAdd(stats + 6, static_cast<unsigned long long>(clock64() - t_start));
      break;
    }
    const int lo = slot[4 * qb + 1], nt = slot[4 * qb + 2], stride = slot[4 * qb + 3];

    int row_start[RQ], row_end[RQ];
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
      const int row = b * R + 2 * quad + i;
      row_start[i] = row < p.rows ? __ldg(p.starts + row) : 0;
      row_end[i] = row < p.rows ? __ldg(p.ends + row) : 0;
      clamp_row_range(row_start[i], row_end[i], p.keys);
    }
    uint32_t cnt = 0;  // candidates of row (lane & 7) in this warpgroup's buffer

#pragma unroll 1
    for (int t = 0, tp = nt - 1; t < nt; ++t, ++it, tp = next_tile(tp, nt, stride)) {
      const int stage = it % S;
      ptx::mbar_wait(full + stage, (it / S) & 1);
      float acc[L::kAcc];
      const uint8_t* k_tile = smem + Cfg::kOffK + stage * L::kKTileBytes + wg * 64 * L::kHeadDim;
      const uint8_t* q_tile = smem + Cfg::kOffQ + qb * L::kQTileBytes;
      logits_tile_mma<L>(acc, k_tile, q_tile);
      float scale0, scale1;
      tile_scales_and_release(smem + Cfg::kOffScales + stage * L::kScaleBytes, wg * 64 + key_local, lane,
                              empty + stage, scale0, scale1);

      float fin[2][RQ];
      logits_epilogue_reduce<L>(acc, smem + Cfg::kOffWeights + qb * L::kWeightBytes, quad, fin);

      // Filter against the running thresholds.
      const int key_wg0 = lo + tp * Cfg::kBlockKeys + wg * 64;
      uint32_t okey[2][RQ];
      bool surv[2][RQ];
#pragma unroll
      for (int i = 0; i < RQ; ++i) {
        const uint64_t th = thr_v[2 * quad + i];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int kabs = key_wg0 + key_local + 8 * h;
          const float v = fin[h][i] * (h ? scale1 : scale0);
          okey[h][i] = order_key(v);
          surv[h][i] = p.probe != 1 && kabs >= row_start[i] && kabs < row_end[i] &&
                       composite(okey[h][i], static_cast<uint32_t>(kabs)) > th;
        }
      }
      // Deterministic slots: per-warp counts per row, exchanged within the warpgroup.
      uint32_t m[2][RQ], wcount[RQ];
#pragma unroll
      for (int i = 0; i < RQ; ++i) {
        m[0][i] = __ballot_sync(0xffffffffu, surv[0][i]);
        m[1][i] = __ballot_sync(0xffffffffu, surv[1][i]);
        wcount[i] = __popc(m[0][i] & qmask) + __popc(m[1][i] & qmask);
      }
      uint32_t* wcp = wc + ((t & 1) * 2 + wg) * 32;  // [warp][row]
      if (lane < 4) {
        wcp[warp_in_wg * 8 + 2 * lane] = wcount[0];
        wcp[warp_in_wg * 8 + 2 * lane + 1] = wcount[1];
      }
      ptx::named_barrier_sync(1 + wg, 128);
      uint32_t before = 0, total = 0;
      {
        const int r = lane & 7;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const uint32_t c = wcp[w * 8 + r];
          total += c;
          before += w < warp_in_wg ? c : 0u;
        }
      }
      const uint32_t base_r = cnt + before;  // for row lane & 7
      cnt += total;
#pragma unroll
      for (int i = 0; i < RQ; ++i) {
        const uint32_t base = __shfl_sync(0xffffffffu, base_r, 2 * quad + i);
        const uint32_t n0 = __popc(m[0][i] & qmask);
        uint32_t* kp = buf_key(wg, 2 * quad + i);
        uint32_t* ip = buf_idx(wg, 2 * quad + i);
        if (surv[0][i]) {
          const uint32_t at = base + __popc(m[0][i] & qmask & lt_mask);
          __stcg(kp + at, okey[0][i]);
          __stcg(ip + at, static_cast<uint32_t>(key_wg0 + key_local));
        }
        if (surv[1][i]) {
          const uint32_t at = base + n0 + __popc(m[1][i] & qmask & lt_mask);
          __stcg(kp + at, okey[1][i]);
          __stcg(ip + at, static_cast<uint32_t>(key_wg0 + key_local + 8));
        }
        if constexpr (Cfg::kWindow) {  // bin the appended candidates into the row's window
          const uint32_t* ws_ = win_s + (wg * 8 + 2 * quad + i) * 4;
          if (ws_[3]) {
            const Window wv{ws_[0], ws_[1], ws_[2]};
            uint32_t* wh = whist_s + (wg * 8 + 2 * quad + i) * 256;
            if (surv[0][i]) atomicAdd(wh + window_bin(wv, okey[0][i]), 1u);
            if (surv[1][i]) atomicAdd(wh + window_bin(wv, okey[1][i]), 1u);
          }
        }
      }
      // Room for a full tile (64 per row) must remain: compact the rows that
      // could overflow. The decision is uniform over the warpgroup (same counts).
      const bool over = __any_sync(0xffffffffu, cnt + 64 > static_cast<uint32_t>(cap));
      if (over) {
        const long long t_over = clock64();
        ptx::named_barrier_sync(1 + wg, 128);  // every append of this tile is visible
#pragma unroll 1
        for (int rr = 0; rr < 2; ++rr) {
          const int r = warp_in_wg + 4 * rr;
          const uint32_t c = __shfl_sync(0xffffffffu, cnt, r);
          if (c > compact_above) {
            const long long t_sel = clock64();
            uint32_t* kp = buf_key(wg, r);
            uint32_t* ip = buf_idx(wg, r);
            uint64_t th;
            int left;
            if constexpr (Cfg::kWindow) {
              uint32_t* ws_ = win_s + (wg * 8 + r) * 4;
              Window wv{ws_[0], ws_[1], ws_[2]};
              bool valid = ws_[3] != 0;
              th = warp_compact_window(kp, ip, static_cast<int>(c), thr_v[r], static_cast<uint32_t>(k), compact_above,
                                       whist_s + (wg * 8 + r) * 256, wv, valid, hist, sk, si, lane, &left);
              if (lane == 0) {
                ws_[0] = wv.lo;
                ws_[1] = wv.span;
                ws_[2] = wv.mult;
                ws_[3] = valid ? 1u : 0u;
              }
            } else {
              const Segs sg{{kp, nullptr}, {ip, nullptr}, {static_cast<int>(c), 0}, 1};
              th = select_row<Cfg::kLeanSelect>(sg, thr_v[r], static_cast<uint32_t>(k), hist, sk, si, lane);
              left = warp_emit(sg, th, lane, [&](int at, uint32_t key, uint32_t idx) {
                __stcg(kp + at, key);
                __stcg(ip + at, idx);
              });
            }
            if (lane == 0) {
              atomicMax(thr + r, static_cast<unsigned long long>(th));
              cnt_s[wg * 8 + r] = static_cast<uint32_t>(left);
              if (p.probe == 2) {
                atomicAdd(stats + 0, 1ull);
                atomicAdd(stats + 1, static_cast<unsigned long long>(c));
                atomicAdd(stats + 2, static_cast<unsigned long long>(clock64() - t_sel));
              }
            }
          }
        }
        ptx::named_barrier_sync(1 + wg, 128);  // compaction done before the next appends
        if (cnt > compact_above) cnt = cnt_s[wg * 8 + (lane & 7)];  // every warp learns the new counts
        if (p.probe == 2 && lane == 0) atomicAdd(stats + 3, static_cast<unsigned long long>(clock64() - t_over));
      }
    }

    // ---- block end: merge the two warpgroups' buffers of each row, emit ----
    const long long t_merge = clock64();
    if (warp_in_wg == 0 && lane < 8) cnt_s[wg * 8 + lane] = cnt;
    ptx::named_barrier_sync(3, Cfg::kMathThreads);
    {
      const int r = gwarp;
      const int row = b * R + r;
      if (row < p.rows) {
        const int start = min(max(__ldg(p.starts + row), 0), p.keys);  // clamp_row_range's start
        const Segs s{{buf_key(0, r), buf_key(1, r)}, {buf_idx(0, r), buf_idx(1, r)},
               {static_cast<int>(cnt_s[r]), static_cast<int>(cnt_s[8 + r])}, 2};
        if (p.probe == 2 && lane == 0) atomicAdd(stats + 4, static_cast<unsigned long long>(s.n[0] + s.n[1]));
        const uint64_t th = select_row<Cfg::kLeanSelect>(s, thr_v[r], static_cast<uint32_t>(k), hist, sk, si, lane);
        int* orow = p.out + size_t(row) * k;
        const int pos = warp_emit(s, th, lane, [&](int at, uint32_t, uint32_t idx) {
          if (at < k) orow[at] = static_cast<int>(idx) - start;
        });
        for (int j = min(pos, k) + lane; j < k; j += 32) orow[j] = -1;
      }
      if (lane == 0) thr_v[r] = 0;
      if constexpr (Cfg::kWindow) {  // fresh windows for the next block
        for (int j = lane; j < 2 * 256; j += 32) whist_s[((j >> 8) * 8 + r) * 256 + (j & 255)] = 0;
        if (lane < 2) win_s[(lane * 8 + r) * 4 + 3] = 0;
      }
    }
    ptx::named_barrier_sync(3, Cfg::kMathThreads);
    __syncwarp();
    if (lane == 0) ptx::mbar_arrive(q_empty + qb);
    if (p.probe == 2 && lane == 0) atomicAdd(stats + 5, static_cast<unsigned long long>(clock64() - t_merge));
  }
}

// ---- host --------------------------------------------------------------------
using Sm90FusedDefault = Sm90FusedConfig<8>;

// Launches the fused kernel. q [rows, 32, 128] fp8, k [keys, 128] fp8, scales
// [keys] fp32, weights [rows, 32] fp32 (contiguous, 16-byte aligned), out
// [rows, topk] int32 contiguous, workspace of fused_workspace_bytes(topk,
// num_sms) bytes (16-byte aligned). Zeroes the counter (one memset) then
// launches one kernel. Tensor-map errors as in launch_sm90_fp8_mqa_logits.
template <class Cfg = Sm90FusedDefault>
inline cudaError_t launch_sm90_fused_mqa_topk(const void* q, const void* k, const float* scales,
                                              const float* weights, const int* starts, const int* ends, int* out,
                                              void* workspace, int rows, int keys, int topk, int num_sms,
                                              cudaStream_t stream, int* map_error = nullptr, int probe = 0,
                                              int cap = 0, RangeErrorSink range_err = {}) {
  using L = typename Cfg::Logits;
  if (rows <= 0) return cudaSuccess;
  CUtensorMap tm_q, tm_k, tm_s, tm_w;
  const uint64_t q_rows = static_cast<uint64_t>(rows) * L::kHeads;
  const int kk = keys > 0 ? keys : 1;  // keys == 0: maps stay valid, every row is empty
  const int res[4] = {
      make_tensor_map_2d(&tm_q, q, CU_TENSOR_MAP_DATA_TYPE_UINT8, L::kHeadDim, q_rows, L::kHeadDim, L::kHeadDim,
                         L::kN, CU_TENSOR_MAP_SWIZZLE_128B),
      make_tensor_map_2d(&tm_k, keys > 0 ? k : q, CU_TENSOR_MAP_DATA_TYPE_UINT8, L::kHeadDim, kk, L::kHeadDim,
                         L::kHeadDim, L::kBlockKeys, CU_TENSOR_MAP_SWIZZLE_128B),
      make_tensor_map_2d(&tm_s, keys > 0 ? static_cast<const void*>(scales) : weights, CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                         kk, 1, (uint64_t(kk) * 4 + 15) / 16 * 16, L::kBlockKeys, 1, CU_TENSOR_MAP_SWIZZLE_NONE),
      make_tensor_map_2d(&tm_w, weights, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, L::kHeads, rows, L::kHeads * 4, L::kHeads,
                         L::kBlockRows, CU_TENSOR_MAP_SWIZZLE_NONE)};
  if (const int e = first_map_error(res, 4)) {
    if (map_error) *map_error = e;
    return cudaErrorInvalidValue;
  }
  auto kernel = &sm90_fused_mqa_topk_kernel<Cfg>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  // cap: 0 = the default; development runs may shrink it (never below
  // topk + 128, a multiple of 4 for the vector passes) within the workspace.
  const int cap_default = fused_candidate_cap(topk);
  cap = cap <= 0 ? cap_default : max(topk + 128, min(cap, cap_default)) & ~3;
  int* counter = static_cast<int*>(workspace);
  err = cudaMemsetAsync(counter, 0, kFusedHeaderBytes, stream);
  if (err != cudaSuccess) return err;
  Sm90FusedParams p{starts, ends, out, reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(workspace) + kFusedHeaderBytes),
                    counter, rows, keys, topk, cap, probe, range_err};
  kernel<<<num_sms, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(tm_q, tm_k, tm_s, tm_w, p);
  return cudaGetLastError();
}

}  // namespace mqa_topk
