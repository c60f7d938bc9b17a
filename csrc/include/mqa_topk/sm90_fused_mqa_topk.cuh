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
// Selection, per row (warp-level pieces in fused_select.cuh, tested off-GPU on
// the warp emulator in tests/emu/; order = composite (value desc, index asc),
// value compared through the order-preserving key of sm90_topk_per_row, -0.0 ==
// +0.0). Each math warpgroup appends the logits of its 64 keys per tile that
// pass the row's threshold to its own candidate buffer of the row (global
// workspace, per CTA, L2-resident): (order key, absolute index) pairs. Slots
// are given in a fixed order (tile, warp, key half, lane) through one
// per-warpgroup exchange of per-warp counts, so buffer contents, and everything
// after, are deterministic.
//
// v2 (kGate; the default, with the select on the math warps): a sample-gated
// scan with one exact select per row.
// 1. Sample: the block's first tiles in the scrambled walk (a pseudo-random
//    sample, fused_sample_tiles) are scanned with no threshold; each thread
//    keeps its 4 largest keys per row; then per row the gate is the key of
//    sample rank rho among those lists so that about 1.5k + 256 of the row's
//    logits are expected at or above it (fused_select.cuh: gate_rank), and the
//    sample's entries below the gate are dropped from the buffers.
// 2. Scan: every other tile with the gate fixed (candidates: key >= gate).
// 3. Select: at the block end one exact select per row over both warpgroups'
//    buffers writes the top min(k, n) relative indices, -1 padded. A gated
//    row with fewer than min(k, n) candidates is unsafe and is rescanned (the
//    producer re-issues the block with only those rows active and no gate): a
//    redo, rare on real inputs (fused_select.cuh gives the probability model).
//    kSelectors: the select runs on the producer warpgroup's 3 idle warps while
//    the math warps scan the next block (two candidate-buffer sets).
// A buffer that fills anyway (a low gate, ties at the gate, a relu-saturated
// row whose logits are mostly exactly 0) is compacted exactly as in v1 (below):
// a buffer can only fill with at least k candidates in it, so the gate is then
// safe and the k-th of the buffer is a safe running threshold.
//
// v1 (kGate = false; the measured baseline, reachable through the dev probes):
// no gate; the threshold starts at -inf and rises only by compactions: when a
// row's buffer could overflow on the next tile, one warp selects its exact k-th
// (`warp_select`) and keeps what is at or above it (stable); the row's shared
// threshold rises to that k-th composite, always the k-th largest of a subset
// of the row, so no element of the row's top-k is ever dropped (SPEC §6).
//
// Key tiles of a block are visited in a scrambled order (a golden-ratio
// stride coprime to the tile count, last tile first), so scores rising with
// position neither bias the sample nor keep a running threshold low.
// Work: blocks are handed out by a global counter (largest row index first:
// causal blocks are longest last) to a persistent grid of one CTA per SM.
// Workspace: a 128-byte header (the block counter and development statistics,
// zeroed before the launch) + kSets x num_sms x 2 x 8 x 2 x cap x 4 bytes
// (fused_workspace_bytes).
#pragma once

#include <type_traits>

#include "fused_select.cuh"
#include "sm90_fp8_mqa_logits.cuh"

namespace mqa_topk {

struct Sm90FusedParams {
  const int* starts;
  const int* ends;
  int* out;          // [rows, topk]
  uint32_t* ws;      // candidate buffers, kSets x num_sms x 2 x 8 x 2 x cap
  int* counter;      // block counter, zero at launch; statistics follow it
  int rows;
  int keys;
  int topk;
  int cap;           // candidates per (warpgroup, row) buffer
  int probe;         // development only: 1 = never append (logits + filter alone), 2 = real + statistics
  RangeErrorSink err;  // bad rows are recorded here (range_check.cuh; null: not recorded)
  int target = 0;      // development only: the gate's candidate target (0: fused_gate_target(topk))
  // kSplit: the pieces' partial top-k ([region][row][piece][topk] keys and
  // absolute indices) and one completion counter per region (zero at launch).
  uint32_t* split_keys = nullptr;
  uint32_t* split_idx = nullptr;
  int* split_ctr = nullptr;
  // kSplitGate: per (region, row, piece) slot kSplitAuxWords words (published
  // list keys, sample tile maxima, sample size, emitted count, constraint key);
  // per region the published-sample counter and the gate-ready flag (zero at
  // launch) and the 8 rows' shared gate keys.
  uint32_t* split_aux = nullptr;
  int* split_sctr = nullptr;
  int* split_gready = nullptr;
  uint32_t* split_gate = nullptr;
  // The v3 kernel's kHybrid share rule (fused_v3_share_blocks): 0 the
  // session-12 rule; n > 0 shares only over the partial last wave's blocks,
  // each share at least n tiles (issue 12, session 26).
  int share_rule = 0;
};

// Block-level control words in shared memory (gate, selector hand-off, redo queue).
struct FusedCtl {
  uint32_t tile_max[8][32];  // gate: each row's largest key in each sample tile
  uint32_t sample_cnt[8];  // gate: sample entries of each row
  uint32_t gated[2];       // per candidate set: rows whose gate is set (bit r)
  int sel_b[2];            // per set: the block handed to the selection (-1: end)
  uint32_t sel_active[2];  // per set: the block's active rows
  uint32_t redo_acc[2];    // per set: rows found unsafe
  uint32_t sel_done[2];    // per set: selector warps done with it
  int rq_b[16];            // redo queue: block, rows, valid flag (producer pops in order)
  uint32_t rq_mask[16];
  int rq_valid[16];
  int rq_reserve;
  int blocks_done;         // blocks finished (rows written or queued for a redo)
  int rq_lo[16];           // kSplit: the redone piece's first key, tiles, region and piece word
  int rq_nt[16];
  int rq_c0[16];
  int rq_piece[16];
  int merge_b;             // kSplit: the block this CTA merges after the piece it just finished (-1: none)
  int sh_b0, sh_t0;        // kSplit: this CTA's share of the tiles: first block, its first tile,
  long long sh_g0, sh_count, sh_total;  //   first global tile, tile count; all tiles of the call
  int sh_gp;               //   CTAs with a share (min(grid, tiles, tiles / split_min_tiles))
  int sh_m;                //   kSplitAlign: pieces per block when the shares follow the blocks (0: they do not)
  uint32_t g_raised;       // kSplitGate: rows whose threshold the shared gate raised (this piece)
  int g_last;              // kSplitGate: this piece published its block's last sample
  uint32_t merge_fail;     // kSplitGate: merged rows whose check failed (redone whole)
  uint32_t local_gate[8];  // kSplitGate: each row's own gate key in this piece (0: none)
};

// kLeanSelect: warp_select_lean instead of warp_select (same results,
// branch-free passes). kGate: the v2 sample gate (else v1). kSelectors (needs
// kGate): the block-end select on the producer warpgroup's warps 1-3, with two
// candidate-buffer sets.
// kLeanAppend (the default since 2026-12-01, measured 2.5% faster at the
// headline): the appends address the buffers by a 32-bit word offset per row
// computed once per block (one wide multiply-add per store instead of a 64-bit
// pointer rebuilt per candidate, and no branch around the position arithmetic).
// kBinned (needs kGate, not kSelectors): 1 = the scan also counts each gated
// row's candidates in a 256-bin shared-memory histogram over [gate, sample
// max] (scan_bin), so the block-end select knows the k-th's bin without
// reading the buffers and finishes in one pass (warp_finish_row_binned);
// 2 = the same bins, counted by one pass at the block end (nothing added to
// the append path): the select is a count pass plus one emit pass, instead of
// the general select's range, histogram, gather and emit passes.
// kSplit: blocks split across CTAs (below, "kSplit"). kSplitGate (needs kSplit):
// the pieces of a split block share one gate ranked from all their samples
// (fused_select.cuh, "split blocks with a shared gate"), emit only what passes
// it, and the merge checks that no piece's threshold cut into the row's top k.
// kSplitThin (needs kSplit): only the blocks of the last partial wave are split
// (split_thin_blocks), the rest run whole.
template <int kNumStages_, bool kLeanSelect_ = false, bool kGate_ = false, bool kSelectors_ = false,
          bool kLeanAppend_ = false, int kBinned_ = 0, bool kSplit_ = false, bool kSplitGate_ = false,
          bool kSplitThin_ = false, bool kSplitAlign_ = false, bool kLeanMma_ = false>
struct Sm90FusedConfig {
  // kLeanMma (dev): the tile's wgmma descriptors as warp-uniform 32-bit low
  // words (logits_tile_mma_lo), as the v2 logits kernel; same arithmetic.
  static constexpr bool kLeanMma = kLeanMma_;
  static constexpr bool kLeanSelect = kLeanSelect_;
  static constexpr bool kGate = kGate_;
  static constexpr bool kSelectors = kSelectors_;
  static constexpr bool kLeanAppend = kLeanAppend_;
  static constexpr bool kBinned = kBinned_ != 0;
  static constexpr bool kBinnedScan = kBinned_ == 1;  // counted by the appends
  static constexpr bool kBinnedEnd = kBinned_ == 2;   // counted at the block end
  static constexpr bool kSplit = kSplit_;
  static constexpr bool kSplitGate = kSplitGate_;
  static constexpr bool kSplitThin = kSplitThin_;
  static constexpr bool kSplitAlign = kSplitAlign_;
  static_assert(!kSplitAlign || (kSplit && !kSplitThin), "aligned pieces are for kSplit's shares");
  static_assert(!kSplitThin || kSplit, "thin splits are splits");
  static_assert(!kSplitGate || kSplit, "the shared gate is for split blocks");
  static_assert(!kSplit || (kGate && !kSelectors), "split blocks: gated scan, select on the math warps");
  static_assert(!kSelectors || kGate, "selector warps need the gated scan");
  static_assert(!kBinned || (kGate && !kSelectors && kLeanSelect), "binned select: gated scan, select on the math warps");
  using Logits = Sm90LogitsConfig<8, 2, kNumStages_>;
  static constexpr int kBlockRows = 8;
  static constexpr int kNumStages = kNumStages_;
  static constexpr int kMathWarpgroups = 2;
  static constexpr int kThreads = 384;
  static constexpr int kMathThreads = 256;
  static constexpr int kSets = kSelectors ? 2 : 1;            // candidate-buffer sets
  static constexpr int kSelectorWarps = kSelectors ? 3 : 0;
  static constexpr int kSelectWarps = 8 + kSelectorWarps;     // warps with selection scratch
  static constexpr int kBlockKeys = Logits::kBlockKeys;       // 128
  static constexpr int kOffK = 0;
  static constexpr int kOffQ = kOffK + kNumStages * Logits::kKTileBytes;
  static constexpr int kOffScales = kOffQ + 2 * Logits::kQTileBytes;
  static constexpr int kOffWeights = kOffScales + kNumStages * Logits::kScaleBytes;
  static constexpr int kOffHist = kOffWeights + 2 * Logits::kWeightBytes;            // [warp][256]
  static constexpr int kOffScratch = kOffHist + kSelectWarps * 256 * 4;              // [warp][key|idx][kScratch]
  static constexpr int kOffWc = kOffScratch + kSelectWarps * 2 * fused_detail::kScratch * 4;  // [2][2 wg][4][8]
  static constexpr int kOffCnt = kOffWc + 2 * 2 * 4 * 8 * 4;                         // [set][2 wg][8 rows]
  static constexpr int kOffThr = kOffCnt + kSets * 2 * 8 * 4;                        // [set][8 rows] u64
  static constexpr int kOffSlot = kOffThr + kSets * 8 * 8;                           // [2][8] int
  static constexpr int kOffCtl = kOffSlot + 2 * 8 * 4;
  static constexpr int kOffBin = kOffCtl + (static_cast<int>(sizeof(FusedCtl)) + 7) / 8 * 8;  // kBinned: [8][256]
  static constexpr int kOffBinPar = kOffBin + (kBinned ? 8 * 256 * 4 : 0);  // kBinned: (lo, mult) [8]
  static constexpr int kOffBars = kOffBinPar + (kBinned ? 8 * 8 : 0);
  static constexpr int kNumBars = 2 * kNumStages + 4 + (kSelectors ? 4 : 0);
  static constexpr int kSmemBytes = kOffBars + kNumBars * 8 + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
  // Candidates per (warpgroup, row) buffer. v1 compacts whenever one fills,
  // so it keeps room for 2k + 128 new ones. A gated row expects about
  // (1.5k + 256) / 2 per warpgroup (and at most kMaxSampleTiles x 64 sample
  // entries before the gate): k + 1920 keeps two sets of buffers under 128 MiB
  // on 132 SMs at k = 2048.
  static constexpr int cap(int topk) { return kGate ? topk + 1920 : 3 * topk + 128; }
};

// Workspace header: the block counter (int) and, for development probe 2,
// fifteen u64 statistics (see scripts/fused_probe.py).
constexpr int kFusedHeaderBytes = 128;
constexpr int kFusedStats = 15;

// Candidate-buffer words per CTA and set, in units of the capacity: 2
// warpgroups x 8 rows x (key, index).
constexpr int kFusedWordsPerCap = 2 * 8 * 2;

// Bytes of workspace a kernel configuration needs (header first).
// kSplit: after the header, three arrays of one int per region (at most 256
// SMs): completion counters, published-sample counters, gate-ready flags.
constexpr int kFusedSplitRegionInts = 256;
constexpr int kFusedSplitMaxSms = kFusedSplitRegionInts - 1;  // (fused_merge_row_gated's scratch)
constexpr int kFusedSplitCtrBytes = 3 * kFusedSplitRegionInts * 4;
// kSplit: words per (region, row, piece) slot of split_aux: the published list
// keys (up to 256), the sample tiles' maxima (32), the sample size, the emitted
// count and the constraint key (0: none), one spare.
constexpr int kSplitAuxList = 0;
constexpr int kSplitAuxTileMax = 256;
constexpr int kSplitAuxSample = 288;
constexpr int kSplitAuxCount = 289;
constexpr int kSplitAuxCon = 290;
constexpr int kSplitAuxWords = 292;
// kSplit: words of one array (keys or indices) of the pieces' partial top-k:
// 2 x num_sms regions of 8 rows x topk.
inline size_t fused_split_words(int topk, int num_sms) { return size_t(2) * num_sms * 8 * size_t(topk); }

// kSplit: words of split_aux (one slot per split_keys row of topk) and of split_gate.
inline size_t fused_split_aux_words(int num_sms) { return size_t(2) * num_sms * 8 * kSplitAuxWords; }
inline size_t fused_split_gate_words(int num_sms) { return size_t(num_sms) * 8; }

template <class Cfg>
inline size_t fused_workspace_bytes(int topk, int num_sms) {
  return kFusedHeaderBytes +
         (Cfg::kSplit ? kFusedSplitCtrBytes +
                            (2 * fused_split_words(topk, num_sms) + fused_split_aux_words(num_sms) +
                             fused_split_gate_words(num_sms)) * 4
                      : 0) +
         size_t(Cfg::kSets) * size_t(num_sms) * kFusedWordsPerCap * size_t(Cfg::cap(topk)) * 4;
}

template <bool kLean>
__device__ __forceinline__ uint64_t select_row(const fused_detail::Segs& s, uint64_t thr, uint32_t k, uint32_t* hist,
                                               uint32_t* sk, uint32_t* si, int lane) {
  if constexpr (kLean) return fused_detail::warp_select_lean(s, thr, k, hist, sk, si, lane);
  else return fused_detail::warp_select(s, thr, k, hist, sk, si, lane);
}

// A shared-memory threshold read once by lane 0 and given to the whole warp
// (another warp may raise it between the lanes' reads).
__device__ __forceinline__ uint64_t warp_read_u64(const unsigned long long* p, int lane) {
  uint64_t v = 0;
  if (lane == 0) v = *reinterpret_cast<const volatile unsigned long long*>(p);
  const uint32_t lo = __shfl_sync(0xffffffffu, static_cast<uint32_t>(v), 0);
  const uint32_t hi = __shfl_sync(0xffffffffu, static_cast<uint32_t>(v >> 32), 0);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// Visible keys of a row, clamped to [0, keys] (range_check.cuh: clamp_row_range);
// *start is the clamped start, which the output indices are relative to.
__device__ __forceinline__ int row_length(const Sm90FusedParams& p, int row, int* start) {
  const int s = min(max(__ldg(p.starts + row), 0), p.keys);
  const int e = min(max(__ldg(p.ends + row), s), p.keys);
  *start = s;
  return e - s;
}

// kSplit: visible keys of a row within a piece's key range [lo, hi); *start
// as in row_length.
__device__ __forceinline__ int piece_row_length(const Sm90FusedParams& p, int row, int lo, int hi, int* start) {
  const int s = min(max(__ldg(p.starts + row), 0), p.keys);
  const int e = min(max(__ldg(p.ends + row), s), p.keys);
  *start = s;
  return max(0, min(e, hi) - max(s, lo));
}

// ---- kSplit: blocks split across CTAs ------------------------------------------
// The call's key tiles (blocks in order, each block's tiles in order; blocks
// with no tile left out) are numbered 0..total-1 and CTA c < gp = min(grid,
// total) takes the contiguous share [total c / gp, total (c + 1) / gp), as
// the dense kernel does: every CTA gets the same number of tiles, whatever the
// row count. A block whose tiles fall in the shares of CTAs c0..c1 (c0 < c1)
// is split into c1 - c0 + 1 pieces, one per CTA. Each piece runs the whole v2
// scan (sample, gate, scan, select, redo) on its key range and writes its rows'
// exact top k (key, absolute index; key 0 pads) to the block's region of the
// workspace, [row][piece][k] at region 2 c0 (regions of different blocks
// never overlap: a block's pieces use slots 2 c0 .. c0 + c1 < 2 c0' of the
// next split block). The CTA that completes the region's counter merges: one
// exact select per row over the pieces' entries, in the same launch.

// The CTA owning global tile t.
__device__ __forceinline__ int split_owner(long long t, long long total, int gp) {
  return static_cast<int>(((t + 1) * gp - 1) / total);
}

// kSplitThin: with B blocks on S CTAs, only the B mod S blocks of the last,
// partial wave are split (the lowest-numbered: the shortest of a causal
// chunk), each over at most kThinPieces CTAs; the other blocks run whole, one
// CTA each, handed out by the block counter after the CTA's share (largest
// first). With fewer blocks than CTAs every block is split, over all CTAs.
constexpr int kThinPieces = 32;
__device__ __forceinline__ int split_thin_blocks(int nblocks, int grid) {
  return nblocks >= grid ? nblocks % grid : nblocks;
}

// kSplit: the fewest 128-key tiles a piece gets (fewer CTAs when the tiles are
// few: each piece pays a fixed cost, its sample, its select and k entries of the
// merge). Measured on the H200 at 64 rows x 64K keys (variant 7 on 132 / 96 / 64
// CTAs, BENCHMARKS.md 2026-12-02): top-512 0.210 / 0.185 / 0.208 ms, top-1024
// 0.284 / 0.234 / 0.241, top-2048 0.539 / 0.342 / 0.315; from 256 rows on every
// SM is best.
__host__ __device__ constexpr int split_min_tiles(int topk) { return topk >= 2048 ? 64 : 40; }

// kSplitAlign: the shares follow the blocks (each of the B blocks cut into m
// equal pieces, on m B CTAs) when there are no more blocks than CTAs with a
// share (gp), every block has at least m tiles, no block has more than 1.15x
// the mean, and m B uses at least 90% of gp. Equal shares over gp CTAs would
// otherwise cut most blocks off their boundaries: a CTA whose share straddles
// two blocks runs two pieces, each paying a piece's fixed cost (its sample,
// select and k entries of the merge). Development variant 10, not yet measured.
__host__ __device__ constexpr long long split_align_pieces(long long nblocks, long long gp, long long total,
                                                        long long tmin, long long tmax) {
  if (nblocks <= 0 || nblocks > gp) return 0;
  const long long m = gp / nblocks;
  if (m < 2 || tmin < m || tmax * nblocks * 100 > 115 * total || m * nblocks * 10 < 9 * gp) return 0;
  return m;
}

// This CTA's share, into ctl (every thread calls it: it synchronises the CTA):
// of the tiles of blocks [0, nblocks) over at most max_cta CTAs, each share at
// least min_tiles tiles (when there are that many); kAlign: split_align_pieces.
// Ctl: FusedCtl, or any struct with the sh_* fields (the v3 kernel's kShares).
template <int kThreads, bool kAlign = false, class Ctl = FusedCtl>
__device__ __forceinline__ void fused_split_share(const Sm90LogitsParams& lp, Ctl* ctl, int nblocks,
                                                  long long max_cta, int min_tiles = 1) {
  __shared__ long long s_warp[kThreads / 32];
  __shared__ int s_min[kThreads / 32], s_max[kThreads / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per = (nblocks + kThreads - 1) / kThreads;
  const int b_beg = min(tid * per, nblocks), b_end = min(b_beg + per, nblocks);
  long long mine = 0;
  int tmin = 0x7fffffff, tmax = 0;
  for (int b = b_beg; b < b_end; ++b) {
    int lo, hi;
    const int n = block_span<8, 128>(lp, b, lo, hi);
    mine += n;
    tmin = min(tmin, n);
    tmax = max(tmax, n);
  }
  long long incl = mine;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const long long v = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += v;
  }
  if constexpr (kAlign) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
      tmin = min(tmin, __shfl_xor_sync(0xffffffffu, tmin, d));
      tmax = max(tmax, __shfl_xor_sync(0xffffffffu, tmax, d));
    }
    if (lane == 0) {
      s_min[warp] = tmin;
      s_max[warp] = tmax;
    }
  }
  if (lane == 31) s_warp[warp] = incl;
  if (tid == 0) ctl->sh_b0 = -1;
  __syncthreads();
  long long before = 0, total = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    before += w < warp ? s_warp[w] : 0;
    total += s_warp[w];
  }
  long long gp =
      min(min(static_cast<long long>(gridDim.x), max_cta), min(total, max(1ll, total / max(1, min_tiles))));
  const long long c = blockIdx.x;
  if constexpr (kAlign) {
    int amin = 0x7fffffff, amax = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      amin = min(amin, s_min[w]);
      amax = max(amax, s_max[w]);
    }
    const long long m = split_align_pieces(nblocks, gp, total, amin, amax);
    if (m > 0) {
      gp = m * nblocks;
      // CTA c runs piece c mod m of block c / m; the thread holding that block writes the share.
      const long long bc = c / m, ic = c % m;
      if (c < gp && b_beg <= bc && bc < b_end) {
        long long acc = before + incl - mine;
        for (int b = b_beg; b < b_end; ++b) {
          int lo, hi;
          const long long n = block_span<8, 128>(lp, b, lo, hi);
          if (b == bc) {
            const long long t0 = n * ic / m, t1 = n * (ic + 1) / m;
            ctl->sh_b0 = b;
            ctl->sh_t0 = static_cast<int>(t0);
            ctl->sh_g0 = acc + t0;
            ctl->sh_count = t1 - t0;
            break;
          }
          acc += n;
        }
      }
      if (tid == 0) {
        if (c >= gp) {
          ctl->sh_g0 = total;
          ctl->sh_count = 0;
        }
        ctl->sh_total = total;
        ctl->sh_gp = static_cast<int>(gp);
        ctl->sh_m = static_cast<int>(m);
      }
      __syncthreads();
      return;
    }
  }
  const long long g0 = c < gp ? total * c / gp : total, g1 = c < gp ? total * (c + 1) / gp : total;
  const long long excl = before + incl - mine;
  if (g1 > g0 && mine > 0 && excl <= g0 && g0 < excl + mine) {
    long long acc = excl;
    for (int b = b_beg; b < b_end; ++b) {
      int lo, hi;
      const int n = block_span<8, 128>(lp, b, lo, hi);
      if (g0 < acc + n) {
        ctl->sh_b0 = b;
        ctl->sh_t0 = static_cast<int>(g0 - acc);
        break;
      }
      acc += n;
    }
  }
  if (tid == 0) {
    ctl->sh_g0 = g0;
    ctl->sh_count = g1 - g0;
    ctl->sh_total = total;
    ctl->sh_gp = static_cast<int>(gp);
  }
  __syncthreads();
}

// kSplit: where row r of piece `pi` of `np` writes in region c0 (keys; the
// indices at the same offset of split_idx).
__device__ __forceinline__ size_t split_offset(int c0, int np, int pi, int r, int k) {
  return (size_t(2) * c0 * 8 + size_t(r) * np + pi) * size_t(k);
}

// Where a row's select writes: the output row (keys == nullptr), or, for a
// piece of a split block (kSplit), its slot in the block's region (keys and
// absolute indices, key 0 padding) with the row clamped to [lo, hi).
struct RowSink {
  uint32_t* keys;
  uint32_t* idx;
  int lo, hi;
};

// The block-end select of row r of block b over both warpgroups' buffers of
// candidate set `set` (one warp): writes the row, or returns false when its
// gate was unsafe (the caller queues a redo).
template <class Cfg>
__device__ __forceinline__ bool fused_finish_row(const Sm90FusedParams& p, int b, int r, uint32_t* ws_set,
                                                 const uint32_t* cnt_set, uint64_t thr, bool gated, uint32_t* hist,
                                                 uint32_t* sk, uint32_t* si, int lane,
                                                 unsigned long long* stats, RowSink sink = {nullptr, nullptr, 0, 0},
                                                 uint32_t* cands_out = nullptr) {
  using namespace fused_detail;
  const int row = b * 8 + r;
  const size_t cap = size_t(p.cap);
  const uint32_t* k0 = ws_set + size_t((0 * 8 + r) * 2) * cap;
  const uint32_t* k1 = ws_set + size_t((1 * 8 + r) * 2) * cap;
  const Segs s{{k0, k1}, {k0 + cap, k1 + cap}, {static_cast<int>(cnt_set[r]), static_cast<int>(cnt_set[8 + r])}, 2};
  int start;
  const int n = sink.keys ? piece_row_length(p, row, sink.lo, sink.hi, &start) : row_length(p, row, &start);
  if (sink.keys) start = 0;  // absolute indices
  const uint32_t k = static_cast<uint32_t>(p.topk);
  const uint32_t need = min(k, static_cast<uint32_t>(n));
  int* orow = p.out + size_t(row) * p.topk;
  uint32_t cands = 0;
  bool ok;
  if (sink.keys)
    ok = warp_finish_row<Cfg::kLeanSelect>(s, thr, k, need, gated, start, hist, sk, si, lane, &cands,
                                           [&](int at, int v, uint32_t key) {
                                             // kSplitGate: the merge reads the count, no padding.
                                             if (Cfg::kSplitGate && key == 0) return;
                                             sink.keys[at] = key;
                                             sink.idx[at] = static_cast<uint32_t>(v);
                                           });
  else
    ok = warp_finish_row<Cfg::kLeanSelect>(s, thr, k, need, gated, start, hist, sk, si, lane, &cands,
                                           [&](int at, int v, uint32_t) { orow[at] = v; });
  if (p.probe == 2 && lane == 0) {
    atomicAdd(stats + 4, static_cast<unsigned long long>(s.n[0] + s.n[1]));
    atomicAdd(stats + 13, 1ull);
    if (!ok) atomicAdd(stats + 8, 1ull);
  }
  if (cands_out) *cands_out = cands;
  return ok;
}

// kBinned: the block-end select of a gated row by its bins (counted during the
// scan, or here first when count_first); false when the caller must run
// fused_finish_row.
__device__ __forceinline__ bool fused_finish_row_binned(const Sm90FusedParams& p, int b, int r, uint32_t* ws_set,
                                                        const uint32_t* cnt_set, uint32_t* bh, uint32_t lo,
                                                        uint32_t mult, bool count_first, uint32_t* hist, uint32_t* sk,
                                                        uint32_t* si, int lane, unsigned long long* stats,
                                                        RowSink sink = {nullptr, nullptr, 0, 0}) {
  using namespace fused_detail;
  const int row = b * 8 + r;
  const size_t cap = size_t(p.cap);
  const uint32_t* k0 = ws_set + size_t((0 * 8 + r) * 2) * cap;
  const uint32_t* k1 = ws_set + size_t((1 * 8 + r) * 2) * cap;
  const Segs s{{k0, k1}, {k0 + cap, k1 + cap}, {static_cast<int>(cnt_set[r]), static_cast<int>(cnt_set[8 + r])}, 2};
  int start;
  row_length(p, row, &start);
  if (sink.keys) start = 0;  // absolute indices
  int* orow = p.out + size_t(row) * p.topk;
  if (count_first) warp_bin_pass(s, bh, lo, mult, lane);
  bool done;
  if (sink.keys)
    done = warp_finish_row_binned(s, bh, lo, mult, static_cast<uint32_t>(p.topk), start, hist, sk, si, lane,
                                  [&](int at, int v, uint32_t key) {
                                    sink.keys[at] = key;
                                    sink.idx[at] = static_cast<uint32_t>(v);
                                  });
  else
    done = warp_finish_row_binned(s, bh, lo, mult, static_cast<uint32_t>(p.topk), start, hist, sk, si, lane,
                                  [&](int at, int v, uint32_t) { orow[at] = v; });
  if (p.probe == 2 && lane == 0) {
    if (done) {
      atomicAdd(stats + 4, static_cast<unsigned long long>(s.n[0] + s.n[1]));
      atomicAdd(stats + 13, 1ull);
    } else {
      atomicAdd(stats + 14, 1ull);  // general select (the row counts there)
    }
  }
  return done;
}

// kSplit: the merge of row r of a split block (one warp): the exact top
// min(k, n) of the pieces' entries (np x k in the region, key 0 padding never
// eligible) into the output row.
__device__ __forceinline__ void fused_merge_row(const Sm90FusedParams& p, int b, int r, int c0, int np,
                                                uint32_t* hist, uint32_t* sk, uint32_t* si, int lane) {
  using namespace fused_detail;
  const int row = b * 8 + r;
  const size_t off = split_offset(c0, np, 0, r, p.topk);
  const Segs s{{p.split_keys + off, nullptr}, {p.split_idx + off, nullptr}, {np * p.topk, 0}, 1};
  int start;
  const int n = row_length(p, row, &start);
  const uint32_t k = static_cast<uint32_t>(p.topk);
  int* orow = p.out + size_t(row) * p.topk;
  uint32_t cands = 0;
  // Threshold (key 1, any index): the padding (key 0) is never kept.
  warp_finish_row<true>(s, uint64_t(1) << 32, k, min(k, static_cast<uint32_t>(n)), false, start, hist, sk, si, lane,
                        &cands, [&](int at, int v, uint32_t) { orow[at] = v; });
}

// kSplitGate: the merge of row r of a split block (one warp). Piece i emitted
// S_i: its exact top k, or every entry of it above its threshold at the end
// (its own gate, or the shared gate G if that arrived first: timing decides).
// So that the result does not depend on timing, the merge keeps of S_i only
// F_i = the entries with key >= e_i = max(its own gate key l_i, G) (l_i = 0
// when it was not gated or was redone): F_i is then the top min(k, c) of the
// piece's entries >= e_i whatever S_i was, in the piece's candidate order. A
// piece with fewer than k in F_i may miss entries below e_i (its constraint).
// An entry of the row's top k missing from U = the union of the F_i is below
// some constraint and above U's k-th, so when at least min(k, n) entries of U
// reach the largest constraint, their top k is the row's: written, true.
// Otherwise false (nothing written; the caller redoes the row whole). U is
// gathered in piece order into this CTA's two candidate buffers of row r (free
// here), or, when it does not fit, filtered in place in the pieces' slots
// (key 0 where an entry is not in F_i; key 0 is never eligible).
// Scratch: sk/si (2 x kScratch words, contiguous) hold the pieces' count
// prefix [0, np] and their e_i [np + 1, 2 np + 1); hist counts the F_i.
__device__ __forceinline__ bool fused_merge_row_gated(const Sm90FusedParams& p, int b, int r, int c0, int np,
                                                      uint32_t* ws_set, uint32_t* hist, uint32_t* sk, uint32_t* si,
                                                      int lane) {
  using namespace fused_detail;
  static_assert(2 * kFusedSplitMaxSms + 1 <= 2 * kScratch, "merge scratch");
  const int row = b * 8 + r;
  const int k = p.topk;
  const size_t cap = size_t(p.cap);
  const uint32_t* aux0 = p.split_aux + (size_t(2) * c0 * 8 + size_t(r) * np) * kSplitAuxWords;
  uint32_t* pre = sk;            // [np + 1]: sk then si (contiguous)
  uint32_t* lim = sk + np + 1;   // [np]: e_i
  const uint32_t g = __ldcg(p.split_gate + size_t(c0) * 8 + r);
  uint32_t base = 0;
  for (int i0 = 0; i0 < np; i0 += 32) {
    const int i = i0 + lane;
    const uint32_t c = i < np ? __ldcg(aux0 + size_t(i) * kSplitAuxWords + kSplitAuxCount) : 0u;
    if (i < np) lim[i] = max(__ldcg(aux0 + size_t(i) * kSplitAuxWords + kSplitAuxCon), g);
    const uint32_t incl = warp_inclusive_sum(c, lane);
    if (i < np) pre[i + 1] = base + incl;
    base += __shfl_sync(0xffffffffu, incl, 31);
  }
  if (lane == 0) pre[0] = 0;
  __syncwarp();
  const uint32_t total = base;
  uint32_t* d0k = ws_set + size_t((0 * 8 + r) * 2) * cap;
  uint32_t* d1k = ws_set + size_t((1 * 8 + r) * 2) * cap;
  const uint32_t lt = (1u << lane) - 1u;
  // One pass over the S_i in order: F_i's entries to U (while it fits), F_i's sizes to hist.
  uint32_t kept = 0;
#pragma unroll 1
  for (uint32_t e0 = 0; e0 < total; e0 += 32 * 4) {
    uint32_t kv[4], iv[4];
    int pc[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint32_t e = e0 + u * 32 + lane;
      kv[u] = iv[u] = 0;
      pc[u] = 0;
      if (e < total) {
        int lo = 0, hi = np - 1;  // the piece holding entry e: pre[i] <= e < pre[i + 1]
        while (lo < hi) {
          const int mid = (lo + hi + 1) >> 1;
          if (pre[mid] <= e) lo = mid;
          else hi = mid - 1;
        }
        pc[u] = lo;
        const size_t off = split_offset(c0, np, lo, r, k) + (e - pre[lo]);
        kv[u] = __ldcg(p.split_keys + off);
        iv[u] = __ldcg(p.split_idx + off);
      }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const uint32_t e = e0 + u * 32 + lane;
      const bool keep = e < total && kv[u] >= lim[pc[u]];
      const uint32_t m = __ballot_sync(0xffffffffu, keep);
      const uint32_t at = kept + __popc(m & lt);
      if (keep) {
        atomicAdd(hist + pc[u], 1u);
        if (at < 2 * cap) {
          uint32_t* dk = at < cap ? d0k + at : d1k + (at - cap);
          __stcg(dk, kv[u]);
          __stcg(dk + cap, iv[u]);
        }
      }
      kept += __popc(m);
    }
  }
  __syncwarp();
  // The largest constraint: e_i of the pieces with fewer than k in F_i.
  uint32_t gmax = 1;
  for (int i = lane; i < np; i += 32)
    if (hist[i] < static_cast<uint32_t>(k)) gmax = max(gmax, lim[i]);
  gmax = __reduce_max_sync(0xffffffffu, gmax);
  __syncwarp();
  for (int i = lane; i < np; i += 32) hist[i] = 0;
  __syncwarp();
  Segs s;
  if (kept <= 2 * cap) {
    s = Segs{{d0k, d1k}, {d0k + cap, d1k + cap},
             {static_cast<int>(min(size_t(kept), cap)), static_cast<int>(kept > cap ? kept - cap : 0)}, 2};
  } else {
    for (int i = 0; i < np; ++i) {
      const uint32_t c = pre[i + 1] - pre[i], l = lim[i];
      uint32_t* kp = p.split_keys + split_offset(c0, np, i, r, k);
      for (int j = lane; j < k; j += 32)
        if (static_cast<uint32_t>(j) >= c || __ldcg(kp + j) < l) __stcg(kp + j, 0u);
    }
    const size_t off = split_offset(c0, np, 0, r, k);
    s = Segs{{p.split_keys + off, nullptr}, {p.split_idx + off, nullptr}, {np * k, 0}, 1};
  }
  __syncwarp();
  int start;
  const int n = row_length(p, row, &start);
  int* orow = p.out + size_t(row) * k;
  uint32_t cands = 0;
  return warp_finish_row<true>(s, gate_threshold(gmax), static_cast<uint32_t>(k),
                               min(static_cast<uint32_t>(k), static_cast<uint32_t>(n)), true, start, hist, sk, si,
                               lane, &cands, [&](int at, int v, uint32_t) { orow[at] = v; });
}

// The redo queue of a control block Ctl (members rq_b, rq_mask, rq_valid [16],
// rq_reserve; FusedCtl, FusedV3Ctl): a ring of 16 entries, pushed by the
// threads that find unsafe rows, popped in order by the producer.
// Push (one thread): block b, rows mask; extra(v, at) stores any further fields
// of entry `at` before it is published.
template <class Ctl, class Extra>
__device__ __forceinline__ void redo_queue_push(Ctl* ctl, int b, uint32_t mask, Extra&& extra) {
  volatile Ctl* v = ctl;
  const int at = atomicAdd(&ctl->rq_reserve, 1) & 15;
  v->rq_b[at] = b;
  v->rq_mask[at] = mask;
  extra(v, at);
  __threadfence_block();
  v->rq_valid[at] = 1;
}
// Pop (the producer; `head` its position): false when the next entry is not
// published yet; extra(v, at) reads any further fields before the slot is freed.
template <class Ctl, class Extra>
__device__ __forceinline__ bool redo_queue_pop(volatile Ctl* v, int& head, int& b, uint32_t& mask, Extra&& extra) {
  const int at = head & 15;
  if (!v->rq_valid[at]) return false;
  __threadfence_block();
  b = v->rq_b[at];
  mask = v->rq_mask[at];
  extra(v, at);
  v->rq_valid[at] = 0;
  ++head;
  return true;
}

// Queues a redo of block b's rows `mask` (one thread), then counts the block as
// finished. The producer pops entries in order.
// kSplit: the piece's first key, tiles, region (-1: a whole block) and piece
// word go with the redo.
__device__ __forceinline__ void fused_block_finished(FusedCtl* ctl, int b, uint32_t mask, int lo = 0, int nt = 0,
                                                     int c0 = -1, int piece = 0) {
  if (mask)
    redo_queue_push(ctl, b, mask, [&](volatile FusedCtl* v, int at) {
      v->rq_lo[at] = lo;
      v->rq_nt[at] = nt;
      v->rq_c0[at] = c0;
      v->rq_piece[at] = piece;
    });
  __threadfence_block();
  atomicAdd(&ctl->blocks_done, 1);
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
  uint64_t* sel_full = bars + 2 * S + 4;   // kSelectors: [set], math -> selectors
  uint64_t* sel_empty = bars + 2 * S + 6;  // kSelectors: [set], selectors -> math
  uint32_t* hist_all = reinterpret_cast<uint32_t*>(smem + Cfg::kOffHist);
  uint32_t* scratch_all = reinterpret_cast<uint32_t*>(smem + Cfg::kOffScratch);
  uint32_t* wc = reinterpret_cast<uint32_t*>(smem + Cfg::kOffWc);
  uint32_t* cnt_all = reinterpret_cast<uint32_t*>(smem + Cfg::kOffCnt);
  unsigned long long* thr_all = reinterpret_cast<unsigned long long*>(smem + Cfg::kOffThr);
  volatile int* slot = reinterpret_cast<volatile int*>(smem + Cfg::kOffSlot);  // [2][8]
  FusedCtl* ctl = reinterpret_cast<FusedCtl*>(smem + Cfg::kOffCtl);
  volatile FusedCtl* ctl_v = ctl;
  uint32_t* bin_hist = reinterpret_cast<uint32_t*>(smem + Cfg::kOffBin);   // kBinned: [row][256]
  // kBinned: per row the bins' (lo, mult); lo = 0: no valid bins (no gate, or
  // an exact compaction raised the threshold).
  uint2* bin_par = reinterpret_cast<uint2*>(smem + Cfg::kOffBinPar);

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int lane = tid & 31;
  const int gwarp = tid >> 5;  // 0..11
  if (tid == 0) {
    init_pipeline_barriers<S, Cfg::kMathThreads / 32>(full, empty, q_full, q_empty);
    if constexpr (Cfg::kSelectors) {
      for (int i = 0; i < 2; ++i) {
        ptx::mbar_init(sel_full + i, 1);
        ptx::mbar_init(sel_empty + i, Cfg::kSelectorWarps);
      }
      ptx::fence_barrier_init();
    }
  }
  for (int i = tid; i < Cfg::kSelectWarps * 256; i += Cfg::kThreads) hist_all[i] = 0;
  for (int i = tid; i < Cfg::kSets * R; i += Cfg::kThreads) thr_all[i] = 0;
  for (int i = tid; i < static_cast<int>(sizeof(FusedCtl) / 4); i += Cfg::kThreads)
    reinterpret_cast<uint32_t*>(ctl)[i] = 0;
  if constexpr (Cfg::kBinned)
    for (int i = tid; i < 8 * 256 + 2 * 8; i += Cfg::kThreads) bin_hist[i] = 0;  // bin_par follows bin_hist
  __syncthreads();

  const int nblocks = (p.rows + R - 1) / R;
  if constexpr (Cfg::kSplit)
    fused_split_share<Cfg::kThreads, Cfg::kSplitAlign>(
        Sm90LogitsParams{p.starts, p.ends, nullptr, 0, p.rows, p.keys}, ctl,
        Cfg::kSplitThin ? split_thin_blocks(nblocks, gridDim.x) : nblocks,
        Cfg::kSplitThin && nblocks >= static_cast<int>(gridDim.x)
            ? static_cast<long long>(split_thin_blocks(nblocks, gridDim.x)) * kThinPieces
            : static_cast<long long>(gridDim.x),
        Cfg::kSplitThin ? 1 : split_min_tiles(p.topk));
  const int k = p.topk;
  const size_t set_words = size_t(kFusedWordsPerCap) * size_t(p.cap);
  unsigned long long* stats = reinterpret_cast<unsigned long long*>(p.counter) + 1;
  uint32_t* ws_cta = p.ws + size_t(blockIdx.x) * Cfg::kSets * set_words;

  if (wg == Cfg::kMathWarpgroups) {
    // Warps 9-11 check the row ranges first (range_check.cuh): idle, or
    // selectors that would wait for the first block anyway.
    check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelFused,
                     range_checker_index(tid, Cfg::kMathThreads + 32, 96), gridDim.x * 96);
    if constexpr (Cfg::kSplit) {
      // No share visits a block whose rows are all empty: warps 9-11 write its rows' -1.
      if (gwarp > 8) {
        const Sm90LogitsParams lp{p.starts, p.ends, nullptr, 0, p.rows, p.keys};
        for (int b = blockIdx.x * 3 + gwarp - 9; b < nblocks; b += gridDim.x * 3) {
          int lo, hi;
          if (block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi) != 0) continue;
          for (int r = 0; r < R && b * R + r < p.rows; ++r)
            for (int j = lane; j < k; j += 32) p.out[size_t(b * R + r) * k + j] = -1;
        }
      }
    }
    if (gwarp == 8) {
      // ---------------- producer: one thread takes blocks and issues every TMA ----------------
      if (lane != 0) return;
      ptx::prefetch_tensor_map(&tm_q);
      ptx::prefetch_tensor_map(&tm_k);
      ptx::prefetch_tensor_map(&tm_scales);
      ptx::prefetch_tensor_map(&tm_weights);
      int it = 0, issued = 0, head = 0;
      const Sm90LogitsParams lp{p.starts, p.ends, nullptr, 0, p.rows, p.keys};
      // A queued redo (rows of a finished block to rescan with no gate), if any.
      // kSplit: the piece of a redo or of the share walk (c0 = -1: a whole block).
      int plo = 0, pnt = 0, pc0 = -1, ppiece = 0;
      auto pop_redo = [&](int& b, uint32_t& mask) {
        if constexpr (!Cfg::kGate) return false;
        return redo_queue_pop(ctl_v, head, b, mask, [&](volatile FusedCtl* v, int at) {
          plo = v->rq_lo[at];
          pnt = v->rq_nt[at];
          pc0 = v->rq_c0[at];
          ppiece = v->rq_piece[at];
        });
      };
      // kSplit: the walk over this CTA's share.
      long long sg = 0, sleft = 0;
      int sb = 0, sta = 0;
      if constexpr (Cfg::kSplit) {
        sg = ctl_v->sh_g0;
        sleft = ctl_v->sh_b0 >= 0 ? ctl_v->sh_count : 0;
        sb = ctl_v->sh_b0;
        sta = ctl_v->sh_t0;
      }
      const long long stotal = Cfg::kSplit ? ctl_v->sh_total : 0;
      // Blocks [0, nthin) are split (kSplitThin: those of the last partial wave; all, else).
      const int nthin = !Cfg::kSplit ? 0 : Cfg::kSplitThin ? split_thin_blocks(nblocks, gridDim.x) : nblocks;
      const int sgp = Cfg::kSplit ? ctl_v->sh_gp : 0;
      const int sm_pieces = Cfg::kSplitAlign ? ctl_v->sh_m : 0;  // kSplitAlign: pieces per block, or 0
      for (int qi = 0;; ++qi) {
        const int qb = qi & 1;
        ptx::mbar_wait(q_empty + qb, ((qi >> 1) & 1) ^ 1);
        // Claim the next block only once its Q buffer is free (one block ahead).
        int b = -1;
        uint32_t active = 0xffu;
        // A redo is a rescan with no gate (a gated redo of a block whose rows
        // all failed would fail again, forever).
        bool redo = pop_redo(b, active);
        bool have = redo;
        if (!have) {
          int w = nblocks;
          if constexpr (Cfg::kSplit) {
            if (sleft > 0) {
              int blo, bhi;
              const int ntb = block_span<R, Cfg::kBlockKeys>(lp, sb, blo, bhi);
              const int ntp = static_cast<int>(min(static_cast<long long>(ntb - sta), sleft));
              const long long tb = sg - sta;  // the block's first global tile
              int c0, c1;
              if (Cfg::kSplitAlign && sm_pieces > 0) {  // the shares follow the blocks
                c0 = sb * sm_pieces;
                c1 = c0 + sm_pieces - 1;
              } else {
                c0 = split_owner(tb, stotal, sgp);
                c1 = split_owner(tb + ntb - 1, stotal, sgp);
              }
              b = sb;
              plo = blo + sta * Cfg::kBlockKeys;
              pnt = ntp;
              pc0 = c1 > c0 ? c0 : -1;
              ppiece = c1 > c0 ? ((c1 - c0 + 1) << 16) | (static_cast<int>(blockIdx.x) - c0) : 0;
              sg += ntp;
              sleft -= ntp;
              if (sleft > 0) {
                int l2, h2;
                next_block<R, Cfg::kBlockKeys>(lp, sb, l2, h2);
                sta = 0;
              }
              active = 0xffu;
              have = true;
            } else if (Cfg::kSplitThin) {
              w = atomicAdd(p.counter, 1);  // then whole blocks
            }
          } else {
            w = atomicAdd(p.counter, 1);
          }
          if (have) {
          } else if (w < nblocks - nthin) {
            b = nblocks - 1 - w;
            active = 0xffu;
            have = true;
            if constexpr (Cfg::kSplit) {  // a whole block of kSplitThin
              int bhi;
              pnt = block_span<R, Cfg::kBlockKeys>(lp, b, plo, bhi);
              pc0 = -1;
              ppiece = 0;
            }
          } else if constexpr (Cfg::kGate) {
            // No new block: a block still in flight may yet need a redo.
            while (ctl_v->blocks_done < issued) __nanosleep(256);
            redo = have = pop_redo(b, active);
          }
        }
        if (!have) {
          slot[8 * qb] = -1;
          ptx::mbar_arrive(q_full + qb);
          return;
        }
        ++issued;
        int lo, hi, nt;
        if constexpr (Cfg::kSplit) {
          lo = plo;
          nt = pnt;
        } else {
          nt = block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi);
        }
        const int stride = tile_stride(nt);
        slot[8 * qb + 0] = b;
        slot[8 * qb + 1] = lo;
        slot[8 * qb + 2] = nt;
        slot[8 * qb + 3] = stride;
        slot[8 * qb + 4] = Cfg::kGate && !redo ? fused_sample_tiles(nt, k, p.target) : 0;
        slot[8 * qb + 5] = static_cast<int>(active);
        slot[8 * qb + 6] = pc0;
        slot[8 * qb + 7] = ppiece;
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
    if constexpr (Cfg::kSelectors) {
      // ---------------- selectors (warps 9-11): the block-end select of each row ----------------
      const int sw = gwarp - 9;
      uint32_t* hist = hist_all + (8 + sw) * 256;
      uint32_t* sk = scratch_all + (8 + sw) * 2 * kScratch;
      uint32_t* si = sk + kScratch;
      const long long t0 = clock64();
      long long busy = 0;
      for (int j = 0;; ++j) {
        const int cs = j & 1;
        ptx::mbar_wait(sel_full + cs, (j >> 1) & 1);
        const int b = ctl_v->sel_b[cs];
        if (b < 0) break;
        const long long tb = clock64();
        const uint32_t active = ctl_v->sel_active[cs];
        const uint32_t gated = ctl_v->gated[cs];
        uint32_t redo = 0;
        for (int r = sw; r < R; r += Cfg::kSelectorWarps) {
          if (((active >> r) & 1u) && b * R + r < p.rows) {
            const bool ok = fused_finish_row<Cfg>(p, b, r, ws_cta + cs * set_words, cnt_all + cs * 16,
                                                  warp_read_u64(thr_all + cs * R + r, lane), (gated >> r) & 1u, hist,
                                                  sk, si, lane, stats);
            if (!ok) redo |= 1u << r;
          }
          if (lane == 0) thr_all[cs * R + r] = 0;
        }
        if (lane == 0) {
          if (redo) atomicOr(&ctl->redo_acc[cs], redo);
          __threadfence_block();
          if (atomicAdd(&ctl->sel_done[cs], 1u) == Cfg::kSelectorWarps - 1) {
            const uint32_t mask = atomicExch(&ctl->redo_acc[cs], 0u);
            ctl_v->sel_done[cs] = 0;
            ctl_v->gated[cs] = 0;
            fused_block_finished(ctl, b, mask);
          }
        }
        busy += clock64() - tb;
        __syncwarp();
        if (lane == 0) ptx::mbar_arrive(sel_empty + cs);
      }
      if (p.probe == 2 && lane == 0) {
        atomicAdd(stats + 10, static_cast<unsigned long long>(busy));
        atomicAdd(stats + 11, static_cast<unsigned long long>(clock64() - t0));
      }
    }
    return;
  }

  // ---------------- math warpgroups ----------------
  constexpr int RQ = 2;
  // kLeanMma: descriptor low words of this warpgroup's K slice (stage 0) and of
  // Q (buffer 0), from a warp-uniform warpgroup index.
  [[maybe_unused]] const uint32_t a_lo0 =
      Cfg::kLeanMma ? desc_lo_k128_sw128(smem + Cfg::kOffK + __shfl_sync(0xffffffffu, wg, 0) * 64 * L::kHeadDim)
                    : 0u;
  [[maybe_unused]] const uint32_t b_lo0 = Cfg::kLeanMma ? desc_lo_k128_sw128(smem + Cfg::kOffQ) : 0u;
  const int warp_in_wg = (tid >> 5) & 3;
  const int quad = lane & 3;
  const int key_local = warp_in_wg * 16 + (lane >> 2);
  const uint32_t qmask = 0x11111111u << quad;
  const uint32_t lt_mask = (1u << lane) - 1u;
  uint32_t* hist = hist_all + gwarp * 256;
  uint32_t* sk = scratch_all + gwarp * 2 * kScratch;
  uint32_t* si = sk + kScratch;
  const int cap = p.cap;
  // Rows compacted when one overflows: those at least (cap - k) / 2 past k, so
  // every select removes >= (k + 128) / 2 entries.
  const uint32_t compact_above = static_cast<uint32_t>(k + (cap - k) / 2);

  const long long t_start = clock64();
  int it = 0;
  for (int qi = 0;; ++qi) {
    const int qb = qi & 1;
    const int cs = Cfg::kSets == 2 ? qi & 1 : 0;
    ptx::mbar_wait(q_full + qb, (qi >> 1) & 1);
    const int b = slot[8 * qb];
    if constexpr (Cfg::kSelectors) {
      // The selectors must be done with this set (block qi - 2) before it is reused.
      const long long tw = clock64();
      ptx::mbar_wait(sel_empty + cs, ((qi >> 1) & 1) ^ 1);
      if (p.probe == 2 && lane == 0) atomicAdd(stats + 12, static_cast<unsigned long long>(clock64() - tw));
    }
    if (b < 0) {
      if constexpr (Cfg::kSelectors) {
        if (tid == 0) {
          ctl_v->sel_b[cs] = -1;
          ptx::mbar_arrive(sel_full + cs);
        }
      }
      if (p.probe == 2 && lane == 0) atomicAdd(stats + 6, static_cast<unsigned long long>(clock64() - t_start));
      break;
    }
    const int lo = slot[8 * qb + 1], nt = slot[8 * qb + 2], stride = slot[8 * qb + 3];
    const int ns = slot[8 * qb + 4];
    const uint32_t active = static_cast<uint32_t>(slot[8 * qb + 5]);
    // kSplit: the piece's region (-1: a whole block) and (pieces << 16 | piece).
    const int split_c0 = Cfg::kSplit ? slot[8 * qb + 6] : -1;
    const int split_piece = Cfg::kSplit ? slot[8 * qb + 7] : 0;
    uint32_t* ws_set = ws_cta + cs * set_words;
    uint32_t* cnt_s = cnt_all + cs * 16;  // [wg][row]
    unsigned long long* thr = thr_all + cs * R;
    volatile unsigned long long* thr_v = thr;  // read while other warps may raise it
    auto buf_key = [&](int w, int r) { return ws_set + size_t((w * 8 + r) * 2) * cap; };
    auto buf_idx = [&](int w, int r) { return ws_set + size_t((w * 8 + r) * 2 + 1) * cap; };

    int row_start[RQ], row_end[RQ];
    bool row_on[RQ];
#pragma unroll
    for (int i = 0; i < RQ; ++i) {
      const int row = b * R + 2 * quad + i;
      row_start[i] = row < p.rows ? __ldg(p.starts + row) : 0;
      row_end[i] = row < p.rows ? __ldg(p.ends + row) : 0;
      clamp_row_range(row_start[i], row_end[i], p.keys);
      if constexpr (Cfg::kSplit) {  // the piece's keys only (a no-op for a whole block)
        row_start[i] = max(row_start[i], lo);
        row_end[i] = max(row_start[i], min(row_end[i], lo + nt * Cfg::kBlockKeys));
      }
      row_on[i] = p.probe != 1 && ((active >> (2 * quad + i)) & 1u);
    }
    uint32_t cnt = 0;  // candidates of row (lane & 7) in this warpgroup's buffer
    // kLeanAppend: word offsets of this thread's two rows' key buffers in the set.
    [[maybe_unused]] uint32_t row_off[RQ];
#pragma unroll
    for (int i = 0; i < RQ; ++i) row_off[i] = static_cast<uint32_t>((wg * 8 + 2 * quad + i) * 2) * static_cast<uint32_t>(cap);

    // Compacts rows warp_in_wg and warp_in_wg + 4 of this warpgroup's buffers
    // that hold more than `above` entries: to the exact top k when
    // select = true, else to the entries at or above the row's threshold.
    // Called by the whole warpgroup; the decision is uniform (same counts).
    auto compact = [&](uint32_t above, bool select) {
      ptx::named_barrier_sync(1 + wg, 128);  // every append of this tile is visible
#pragma unroll 1
      for (int rr = 0; rr < 2; ++rr) {
        const int r = warp_in_wg + 4 * rr;
        const uint32_t c = __shfl_sync(0xffffffffu, cnt, r);
        if (c > above) {
          const long long t_sel = clock64();
          uint32_t* kp = buf_key(wg, r);
          uint32_t* ip = buf_idx(wg, r);
          const Segs sg{{kp, nullptr}, {ip, nullptr}, {static_cast<int>(c), 0}, 1};
          // One read for the whole warp: the other warpgroup may raise it meanwhile.
          const uint64_t th0 = warp_read_u64(thr + r, lane);
          int left = static_cast<int>(c);
          uint64_t th = th0;
          // kBinned: the gate's drop pass counts the kept entries in the row's
          // bins; an exact compaction raises the threshold, so the bins no
          // longer describe the row (the block end then takes the general select).
          [[maybe_unused]] uint2 bp = make_uint2(0, 0);
          if constexpr (Cfg::kBinnedScan) {
            bp = bin_par[r];
            if (select) {
              bp.x = 0;
              if (lane == 0) bin_par[r].x = 0;
            }
          }
          if (select || th0 != 0) {
            if (select) th = select_row<Cfg::kLeanSelect>(sg, th0, static_cast<uint32_t>(k), hist, sk, si, lane);
            left = warp_emit(sg, th, lane, [&](int at, uint32_t key, uint32_t idx) {
              __stcg(kp + at, key);
              __stcg(ip + at, idx);
              if constexpr (Cfg::kBinnedScan)
                if (bp.x) atomicAdd(bin_hist + r * 256 + scan_bin(key, bp.x, bp.y), 1u);
            });
          }
          if (lane == 0) {
            if (select) atomicMax(thr + r, static_cast<unsigned long long>(th));
            cnt_s[wg * 8 + r] = static_cast<uint32_t>(left);
            if (p.probe == 2 && select) {
              atomicAdd(stats + 0, 1ull);
              atomicAdd(stats + 1, static_cast<unsigned long long>(c));
              atomicAdd(stats + 2, static_cast<unsigned long long>(clock64() - t_sel));
            }
          }
        }
      }
      ptx::named_barrier_sync(1 + wg, 128);  // compaction done before the next appends
      if (cnt > above) cnt = cnt_s[wg * 8 + (lane & 7)];  // every warp learns the new counts
    };

    // One key tile: MMA, epilogue, filter, deterministic appends, compaction
    // when a buffer could overflow. kSample: also keeps this thread's 4 largest
    // keys per row and counts the row's entries (the gate's sample).
    uint32_t top[RQ][4] = {}, mcnt[RQ] = {0, 0};
    auto tile = [&](auto sample_tag, int t, int tp) {
      constexpr bool kSample = decltype(sample_tag)::value;
      const int stage = it % S;
      ptx::mbar_wait(full + stage, (it / S) & 1);
      float acc[L::kAcc];
      float scale0, scale1;  // before the MMAs, the release after them (tile_scales)
      tile_scales(smem + Cfg::kOffScales + stage * L::kScaleBytes, wg * 64 + key_local, scale0, scale1);
      if constexpr (Cfg::kLeanMma) {
        logits_tile_mma_lo<L>(acc, a_lo0 + stage * (L::kKTileBytes >> 4), b_lo0 + qb * (L::kQTileBytes >> 4));
      } else {
        const uint8_t* k_tile = smem + Cfg::kOffK + stage * L::kKTileBytes + wg * 64 * L::kHeadDim;
        const uint8_t* q_tile = smem + Cfg::kOffQ + qb * L::kQTileBytes;
        logits_tile_mma<L>(acc, k_tile, q_tile);
      }
      release_stage(empty + stage, lane);

      float fin[2][RQ];
      logits_epilogue_reduce<L>(acc, smem + Cfg::kOffWeights + qb * L::kWeightBytes, quad, fin);

      // Filter against the row thresholds.
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
          const bool in = kabs >= row_start[i] && kabs < row_end[i];
          surv[h][i] = row_on[i] && in && composite(okey[h][i], static_cast<uint32_t>(kabs)) > th;
          if constexpr (kSample) {
            top4_insert(top[i], in ? okey[h][i] : 0u);
            mcnt[i] += in ? 1u : 0u;
          }
        }
      }
      if constexpr (kSample) {  // the tile's largest key per row
#pragma unroll
        for (int i = 0; i < RQ; ++i) {
          const int kabs0 = key_wg0 + key_local;
          uint32_t mx = max(kabs0 >= row_start[i] && kabs0 < row_end[i] ? okey[0][i] : 0u,
                            kabs0 + 8 >= row_start[i] && kabs0 + 8 < row_end[i] ? okey[1][i] : 0u);
          mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
          mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
          mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
          if (lane < 4 && mx) atomicMax(&ctl->tile_max[2 * lane + i][t], mx);
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
        if constexpr (Cfg::kLeanAppend) {
          const uint32_t o0 = row_off[i] + base + __popc(m[0][i] & qmask & lt_mask);
          const uint32_t o1 = row_off[i] + base + n0 + __popc(m[1][i] & qmask & lt_mask);
          if (surv[0][i]) {
            __stcg(ws_set + o0, okey[0][i]);
            __stcg(ws_set + o0 + cap, static_cast<uint32_t>(key_wg0 + key_local));
            if constexpr (Cfg::kBinnedScan && !kSample) {  // (lo, mult) from shared memory: registers are at the cap
              const uint2 bp = bin_par[2 * quad + i];
              if (bp.x) atomicAdd(bin_hist + (2 * quad + i) * 256 + scan_bin(okey[0][i], bp.x, bp.y), 1u);
            }
          }
          if (surv[1][i]) {
            __stcg(ws_set + o1, okey[1][i]);
            __stcg(ws_set + o1 + cap, static_cast<uint32_t>(key_wg0 + key_local + 8));
            if constexpr (Cfg::kBinnedScan && !kSample) {  // (lo, mult) from shared memory: registers are at the cap
              const uint2 bp = bin_par[2 * quad + i];
              if (bp.x) atomicAdd(bin_hist + (2 * quad + i) * 256 + scan_bin(okey[1][i], bp.x, bp.y), 1u);
            }
          }
          continue;
        }
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
      }
      // Room for a full tile (64 per row) must remain: compact the rows that
      // could overflow (uniform over the warpgroup: same counts).
      if (__any_sync(0xffffffffu, cnt + 64 > static_cast<uint32_t>(cap))) {
        const long long t_over = clock64();
        compact(compact_above, true);
        if (p.probe == 2 && lane == 0) atomicAdd(stats + 3, static_cast<unsigned long long>(clock64() - t_over));
      }
    };

    int t = 0, tp = nt - 1;
    if constexpr (Cfg::kGate) {
#pragma unroll 1
      for (; t < ns; ++t, ++it, tp = next_tile(tp, nt, stride)) tile(std::true_type{}, t, tp);
      if (ns > 0) {
        // ---- the gate of each row from the sample ----
        const long long t_gate = clock64();
        ptx::named_barrier_sync(3, Cfg::kMathThreads);  // both warpgroups done with the sample (and their selects)
        // Row r's list (64 threads x 4 keys) goes to warp r's histogram, free here.
#pragma unroll
        for (int i = 0; i < RQ; ++i) {
          uint32_t* lst = hist_all + (2 * quad + i) * 256 + gwarp * 32 + (lane >> 2) * 4;
          *reinterpret_cast<uint4*>(lst) = make_uint4(top[i][0], top[i][1], top[i][2], top[i][3]);
          uint32_t mc = mcnt[i];
          mc += __shfl_xor_sync(0xffffffffu, mc, 4);
          mc += __shfl_xor_sync(0xffffffffu, mc, 8);
          mc += __shfl_xor_sync(0xffffffffu, mc, 16);
          if (lane < 4) atomicAdd(&ctl->sample_cnt[2 * lane + i], mc);
        }
        ptx::named_barrier_sync(3, Cfg::kMathThreads);
        {
          const int r = gwarp, row = b * R + r;
          int start_unused;
          const uint32_t n =
              row < p.rows ? static_cast<uint32_t>(Cfg::kSplit ? piece_row_length(p, row, lo, lo + nt * Cfg::kBlockKeys,
                                                                                   &start_unused)
                                                              : row_length(p, row, &start_unused))
                           : 0u;
          const uint32_t msz = ctl_v->sample_cnt[r];
          const uint32_t rho = p.probe != 1 && ((active >> r) & 1u) ? gate_rank(msz, n, static_cast<uint32_t>(p.target > 0 ? p.target : fused_gate_target(k))) : 0u;
          const uint32_t gk = warp_gate_key(hist, ctl->tile_max[r], rho, ns, lane);
          if constexpr (Cfg::kBinned) {  // bins over [gate, the sample's largest key]
            uint32_t tk = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) tk = max(tk, hist[j * 32 + lane]);
            tk = __reduce_max_sync(0xffffffffu, tk);
            if (lane == 0) bin_par[r] = make_uint2(gk, range_mult(tk > gk ? tk - gk : 0u));
          }
          __syncwarp();
          if constexpr (Cfg::kSplitGate) {
            if (split_c0 >= 0) {  // publish this piece's sample of row r for the shared gate
              const int np = split_piece >> 16, pi = split_piece & 0xffff;
              uint32_t* aux = p.split_aux + (size_t(2) * split_c0 * 8 + size_t(r) * np + pi) * kSplitAuxWords;
              warp_write_top_keys(hist, fused_split_list_keys(np), aux + kSplitAuxList, lane);
              aux[kSplitAuxTileMax + lane] = ctl->tile_max[r][lane];
              if (lane == 0) aux[kSplitAuxSample] = msz;
              __threadfence();
            }
          }
#pragma unroll
          for (int j = 0; j < 8; ++j) hist[j * 32 + lane] = 0;
          ctl->tile_max[r][lane] = 0;
          __syncwarp();
          if (lane == 0) {
            ctl_v->sample_cnt[r] = 0;
            if constexpr (Cfg::kSplitGate) ctl_v->local_gate[r] = gk;
            if (gk) {
              atomicMax(thr + r, static_cast<unsigned long long>(gate_threshold(gk)));
              atomicOr(&ctl->gated[cs], 1u << r);
              if (p.probe == 2) atomicAdd(stats + 9, 1ull);
            }
          }
        }
        ptx::named_barrier_sync(3, Cfg::kMathThreads);  // the gates are set
        if constexpr (Cfg::kSplitGate) {
          if (split_c0 >= 0) {
            const int np = split_piece >> 16;
            if (tid == 0) {
              const bool last = atomicAdd(p.split_sctr + split_c0, 1) == np - 1;
              if (last) __threadfence();
              ctl_v->g_last = last ? 1 : 0;
            }
            ptx::named_barrier_sync(3, Cfg::kMathThreads);
            if (ctl_v->g_last) {
              // Every piece has published: rank the union of their samples to the
              // shared gate of each row (warp r: row r), capped like a piece's own
              // gate by the 4th largest sampled tile maximum.
              const int r = gwarp, row = b * R + r;
              const uint32_t* aux0 = p.split_aux + (size_t(2) * split_c0 * 8 + size_t(r) * np) * kSplitAuxWords;
              uint32_t m = 0;
              for (int i = lane; i < np; i += 32) m += __ldcg(aux0 + size_t(i) * kSplitAuxWords + kSplitAuxSample);
              m = __reduce_add_sync(0xffffffffu, m);
              int start_unused;
              const uint32_t n = row < p.rows ? static_cast<uint32_t>(row_length(p, row, &start_unused)) : 0u;
              const int J = fused_split_list_keys(np);
              const uint32_t rho = split_gate_rank(
                  m, n, static_cast<uint32_t>(p.target > 0 ? p.target : fused_gate_target(k)),
                  static_cast<uint32_t>(np * J));
              uint32_t g = rho ? warp_rank_key_strided(aux0 + kSplitAuxList, np, kSplitAuxWords, J, rho, hist, lane) : 0u;
              if (g) g = min(g, warp_rank_key_strided(aux0 + kSplitAuxTileMax, np, kSplitAuxWords, 32, 4u, hist, lane));
              if (lane == 0) {
                p.split_gate[size_t(split_c0) * 8 + r] = g > 1u ? g : 1u;  // 1: published, no gate
                if (g > 1u && ((active >> r) & 1u)) {
                  const unsigned long long gt = gate_threshold(g);
                  if (atomicMax(thr + r, gt) < gt) atomicOr(&ctl->g_raised, 1u << r);
                }
                __threadfence();
              }
              ptx::named_barrier_sync(3, Cfg::kMathThreads);
              if (tid == 0) *reinterpret_cast<volatile int*>(p.split_gready + split_c0) = 1;
            }
          }
        }
        // Drop the sample entries below the gate (kept: key >= gate).
        compact(0u, false);
        if (p.probe == 2 && lane == 0) atomicAdd(stats + 7, static_cast<unsigned long long>(clock64() - t_gate));
      }
    }
    // kSplitGate: a piece that did not publish its block's last sample polls
    // (thread 0, once per tile, the load in flight during the tile) for the
    // shared gate and raises its rows' thresholds to it when it appears.
    [[maybe_unused]] bool poll = false;
    if constexpr (Cfg::kSplitGate) poll = tid == 0 && split_c0 >= 0 && ns > 0 && !ctl_v->g_last;
#pragma unroll 1
    for (; t < nt; ++t, ++it, tp = next_tile(tp, nt, stride)) {
      [[maybe_unused]] int ready = 0;
      if constexpr (Cfg::kSplitGate)
        if (poll) ready = *reinterpret_cast<const volatile int*>(p.split_gready + split_c0);
      tile(std::false_type{}, t, tp);
      if constexpr (Cfg::kSplitGate) {
        if (poll && ready) {
          poll = false;
          __threadfence();
          uint32_t raised = 0;
          for (int r = 0; r < R; ++r) {
            const uint32_t g = *reinterpret_cast<const volatile uint32_t*>(p.split_gate + size_t(split_c0) * 8 + r);
            if (g > 1u && ((active >> r) & 1u)) {
              const unsigned long long gt = gate_threshold(g);
              if (atomicMax(thr + r, gt) < gt) raised |= 1u << r;
            }
          }
          if (raised) atomicOr(&ctl->g_raised, raised);
        }
      }
    }

    // ---- block end ----
    if (warp_in_wg == 0 && lane < 8) cnt_s[wg * 8 + lane] = cnt;
    ptx::named_barrier_sync(3, Cfg::kMathThreads);  // every append and count visible
    __syncwarp();
    if (lane == 0) ptx::mbar_arrive(q_empty + qb);  // Q and weights of this block are no longer read
    if constexpr (Cfg::kSelectors) {
      if (tid == 0) {
        ctl_v->sel_b[cs] = b;
        ctl_v->sel_active[cs] = active;
        ptx::mbar_arrive(sel_full + cs);
      }
    } else {
      // The merge: warp r selects row r over both warpgroups' buffers.
      const long long t_merge = clock64();
      const int r = gwarp;
      if (((active >> r) & 1u) && b * R + r < p.rows) {
        const uint32_t gated = Cfg::kGate ? (ctl_v->gated[cs] >> r) & 1u : 0u;
        // kSplit: a piece of a split block writes its slot of the block's region.
        RowSink sink{nullptr, nullptr, 0, 0};
        if constexpr (Cfg::kSplit) {
          if (split_c0 >= 0) {
            const size_t off = split_offset(split_c0, split_piece >> 16, split_piece & 0xffff, r, k);
            sink = RowSink{p.split_keys + off, p.split_idx + off, lo, lo + nt * Cfg::kBlockKeys};
          }
        }
        // kSplitGate: a row whose threshold the shared gate raised keeps what
        // passes it (the general select; no local safety check: the merge checks).
        const bool raised = Cfg::kSplitGate && ((ctl_v->g_raised >> r) & 1u);
        bool done = false, ok = true;
        uint32_t cands = static_cast<uint32_t>(p.topk);
        if constexpr (Cfg::kBinned) {
          const uint2 bp = bin_par[r];
          // kSplitGate pieces take the general select: their slot keeps candidate
          // order whichever threshold they ended with (fused_merge_row_gated).
          if (gated && bp.x && !(Cfg::kSplitGate && split_c0 >= 0))
            done = fused_finish_row_binned(p, b, r, ws_set, cnt_s, bin_hist + r * 256, bp.x, bp.y, Cfg::kBinnedEnd,
                                           hist, sk, si, lane, stats, sink);
          else
            warp_clear_hist(bin_hist + r * 256, lane);
        }
        const uint64_t thr_end = warp_read_u64(thr + r, lane);
        if (!done)
          ok = fused_finish_row<Cfg>(p, b, r, ws_set, cnt_s, thr_end, gated && !raised, hist, sk, si, lane, stats,
                                     sink, &cands);
        if (!ok && lane == 0) atomicOr(&ctl->redo_acc[cs], 1u << r);
        if constexpr (Cfg::kSplitGate) {
          // The piece's emitted count and constraint (none when it kept its exact top k).
          if (split_c0 >= 0 && ok && lane == 0) {
            const int np = split_piece >> 16, pi = split_piece & 0xffff;
            uint32_t* aux = p.split_aux + (size_t(2) * split_c0 * 8 + size_t(r) * np + pi) * kSplitAuxWords;
            const uint32_t kk = static_cast<uint32_t>(p.topk);
            aux[kSplitAuxCount] = min(cands, kk);
            aux[kSplitAuxCon] = ctl_v->local_gate[r];  // l_i (0 after a redo: the redo runs ungated)
          }
        }
        if constexpr (Cfg::kSplit)
          if (split_c0 >= 0) __threadfence();  // the slot is written before the region's counter counts it
      } else if constexpr (Cfg::kBinned) {
        warp_clear_hist(bin_hist + r * 256, lane);
      }
      if constexpr (Cfg::kBinned) {
        __syncwarp();
        if (lane == 0) bin_par[r] = make_uint2(0, 0);
      }
      if (lane == 0) thr_v[r] = 0;
      ptx::named_barrier_sync(3, Cfg::kMathThreads);
      if (tid == 0) {
        const uint32_t mask = ctl_v->redo_acc[cs];
        ctl_v->redo_acc[cs] = 0;
        ctl_v->gated[cs] = 0;
        if constexpr (Cfg::kSplitGate) {
          ctl_v->g_raised = 0;
          for (int i = 0; i < R; ++i) ctl_v->local_gate[i] = 0;
        }
        if constexpr (Cfg::kSplit) {
          // A piece counts once every row of it is written (after its redo, if any); the
          // CTA that counts a region's last piece merges the block.
          int merge = -1;
          if (split_c0 >= 0 && mask == 0) {
            __threadfence();
            if (atomicAdd(p.split_ctr + split_c0, 1) == (split_piece >> 16) - 1) {
              __threadfence();
              merge = b;
            }
          }
          ctl_v->merge_b = merge;
          // kSplitGate: a merging CTA counts its piece after the merge, with the
          // rows that failed the merge's check queued for a whole-block redo
          // (the producer waits for every count before it stops).
          if (!(Cfg::kSplitGate && merge >= 0)) fused_block_finished(ctl, b, mask, lo, nt, split_c0, split_piece);
        } else {
          fused_block_finished(ctl, b, mask);
        }
      }
      if constexpr (Cfg::kSplit) {
        if (split_c0 >= 0) {  // uniform over the CTA
          ptx::named_barrier_sync(3, Cfg::kMathThreads);
          if constexpr (Cfg::kSplitGate) {
            if (ctl_v->merge_b == b) {
              if (b * R + r < p.rows &&
                  !fused_merge_row_gated(p, b, r, split_c0, split_piece >> 16, ws_cta, hist, sk, si, lane) &&
                  lane == 0)
                atomicOr(&ctl->merge_fail, 1u << r);
              ptx::named_barrier_sync(3, Cfg::kMathThreads);
              if (tid == 0) {
                const uint32_t fail = ctl_v->merge_fail;
                ctl_v->merge_fail = 0;
                int blo, bhi;
                const int bnt =
                    block_span<R, Cfg::kBlockKeys>(Sm90LogitsParams{p.starts, p.ends, nullptr, 0, p.rows, p.keys}, b,
                                                   blo, bhi);
                if (fail && p.probe == 2) atomicAdd(stats + 8, static_cast<unsigned long long>(__popc(fail)));
                fused_block_finished(ctl, b, fail, blo, bnt, -1, 0);
              }
            }
          } else {
            if (ctl_v->merge_b == b && b * R + r < p.rows)
              fused_merge_row(p, b, r, split_c0, split_piece >> 16, hist, sk, si, lane);
          }
        }
      }
      if (p.probe == 2 && lane == 0) atomicAdd(stats + 5, static_cast<unsigned long long>(clock64() - t_merge));
    }
  }
}

// ---- host --------------------------------------------------------------------
using Sm90FusedV1 = Sm90FusedConfig<8>;                           // v1: running threshold only
using Sm90FusedGated8 = Sm90FusedConfig<8, true, true>;           // v2, select on the math warps, 8 stages
using Sm90FusedGated = Sm90FusedConfig<7, true, true>;            // the same with 7 ring stages
using Sm90FusedSelectors = Sm90FusedConfig<7, true, true, true>;  // v2, select on selector warps
using Sm90FusedLeanAppend = Sm90FusedConfig<7, true, true, false, true>;  // Sm90FusedGated + kLeanAppend
using Sm90FusedBinned = Sm90FusedConfig<7, true, true, false, true, 1>;     // + bins counted by the appends
using Sm90FusedBinnedEnd = Sm90FusedConfig<7, true, true, false, true, 2>;  // + bins counted at the block end
using Sm90FusedSplit = Sm90FusedConfig<7, true, true, false, true, 2, true>;  // + blocks split across CTAs
using Sm90FusedSplitGate = Sm90FusedConfig<7, true, true, false, true, 2, true, true>;  // + a shared gate per split block
using Sm90FusedSplitThin = Sm90FusedConfig<7, true, true, false, true, 2, true, true, true>;  // + only the last wave split
using Sm90FusedSplitAlign =
    Sm90FusedConfig<7, true, true, false, true, 2, true, false, false, true>;  // kSplit + shares that follow the blocks
// Measured (BENCHMARKS.md, 2026-12-01, headline top-2048): select on the math
// warps at 7 stages 6.59 ms, at 8 stages 6.76, on selector warps 7.14; with
// lean appends 6.185 against 6.32; with the bins counted at the block end
// 6.186 against 6.255 / 6.267 (bins counted by the appends: 6.69).
using Sm90FusedDefault = Sm90FusedBinnedEnd;
// Dev: the default with lean wgmma descriptors (kLeanMma).
using Sm90FusedLeanMma = Sm90FusedConfig<7, true, true, false, true, 2, false, false, false, false, true>;

// Launches the fused kernel. q [rows, 32, 128] fp8, k [keys, 128] fp8, scales
// [keys] fp32, weights [rows, 32] fp32 (contiguous, 16-byte aligned), out
// [rows, topk] int32 contiguous, workspace of fused_workspace_bytes<Cfg>(topk,
// num_sms) bytes (16-byte aligned). Zeroes the header (one memset) then
// launches one kernel. Tensor-map errors as in launch_sm90_fp8_mqa_logits.
template <class Cfg = Sm90FusedDefault>
inline cudaError_t launch_sm90_fused_mqa_topk(const void* q, const void* k, const float* scales,
                                              const float* weights, const int* starts, const int* ends, int* out,
                                              void* workspace, int rows, int keys, int topk, int num_sms,
                                              cudaStream_t stream, int* map_error = nullptr, int probe = 0,
                                              int cap = 0, RangeErrorSink range_err = {}, int target = 0) {
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
  // topk + 128 nor below the gate's sample, a multiple of 4 for the vector
  // passes) within the workspace.
  const int cap_default = Cfg::cap(topk);
  const int cap_min = Cfg::kGate ? max(topk + 128, fused_detail::kMaxSampleTiles * 64 + 128) : topk + 128;
  cap = cap <= 0 ? cap_default : max(cap_min, min(cap, cap_default)) & ~3;
  if (Cfg::kSplit && num_sms > kFusedSplitMaxSms) return cudaErrorInvalidValue;
  int* counter = static_cast<int*>(workspace);
  // The header (and kSplit's region counters right after it) must be zero.
  const size_t zero_bytes = kFusedHeaderBytes + (Cfg::kSplit ? kFusedSplitCtrBytes : 0);
  err = cudaMemsetAsync(counter, 0, zero_bytes, stream);
  if (err != cudaSuccess) return err;
  uint32_t* ws = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(workspace) + zero_bytes);
  Sm90FusedParams p{starts, ends, out, ws, counter, rows, keys, topk, cap, probe, range_err, target};
  if constexpr (Cfg::kSplit) {
    p.split_ctr = reinterpret_cast<int*>(static_cast<uint8_t*>(workspace) + kFusedHeaderBytes);
    p.split_keys = ws + size_t(Cfg::kSets) * size_t(num_sms) * kFusedWordsPerCap * size_t(Cfg::cap(topk));
    p.split_idx = p.split_keys + fused_split_words(topk, num_sms);
    p.split_sctr = p.split_ctr + kFusedSplitRegionInts;
    p.split_gready = p.split_sctr + kFusedSplitRegionInts;
    p.split_aux = p.split_idx + fused_split_words(topk, num_sms);
    p.split_gate = p.split_aux + fused_split_aux_words(num_sms);
  }
  kernel<<<num_sms, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(tm_q, tm_k, tm_s, tm_w, p);
  return cudaGetLastError();
}

}  // namespace mqa_topk
