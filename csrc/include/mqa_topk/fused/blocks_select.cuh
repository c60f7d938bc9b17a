// The block kernel's per-block selection (sm90_fused_blocks.cuh): its
// configuration and shared-memory layout, the workspace layout, and the
// steps each 8-row block runs on its row group's 8 warps: the sample gate,
// the compaction check and the block-end select. Hopper (sm_90a), torch-free.
//
// Per-warp candidate segments: after the reduce-scatter a lane holds one row
// (4 rg + quad) and two keys of a tile, so warp w of warpgroup (rg, kg) sees
// 16 keys of every tile for each of its 4 rows. It appends what passes its
// lane's threshold to its own segment of the row (segment kg * 4 + w of 8),
// slots from its own ballot: no per-tile exchange, no barrier, and the
// contents are deterministic (tile order, then lane order).
// - Gate: the first ns tiles of the block's scrambled walk (a sample,
//   fused_sample_tiles) are appended with no threshold; both warps of each row
//   rank the sample entries' gate (pair_gate_fast: one histogram pass below
//   the sample's largest key, so about 1.5 k + 256 of the row's logits are
//   expected at or above it), capped at the 4th largest sample-tile maximum
//   (scores correlated with position make one tile's keys alike); each warp
//   then drops its sample entries below it (in place, its own segments).
// - Compaction (rare: ties at the gate, relu-saturated rows, redone rows):
//   every kCheckTiles tiles the row group compares its segment counts with
//   cap - 16 kCheckTiles (what one segment can take before the next check);
//   for a row past it, one warp selects the exact k-th composite over the
//   row's 8 segments (a safe running threshold: the k-th largest of a subset
//   of the row) and re-emits what is at or above it round-robin over the 8
//   segments (entry p to segment p mod 8, slot p / 8: in place, since a slot
//   is written only after the traversal has read it).
// - Block end: both warps of each row (select.cuh, pair_finish_row_gated:
//   the row's candidates binned between its gate and its largest sample key)
//   write the top min(k, n) relative indices, -1 padded. A gated row with
//   fewer than min(k, n) candidates is unsafe: its block is rescanned with no
//   gate (a redo; rare, select.cuh gives the probability model).
// Workspace: a 128-byte header (the block counter) + num_sms x 8 rows x 8
// segments x (keys, indices) x cap words, cap = (k + 1920) / 4 rounded to 4
// (split blocks: three such regions per CTA and the split protocol's records,
// fused_blocks_workspace_bytes).
#pragma once

#include "common.cuh"
#include "select.cuh"
#include "mqa_topk/logits/sm90_fp8_mqa_logits.cuh"

namespace mqa_topk {

// The gate's rank floor: at least mu + z sqrt(mu) sample entries above it,
// mu the entries expected at or above the row's k-th (select.cuh,
// gate_rank_floor), where the sample is capped (fused_sample_tiles: long rows,
// whose redo would be a long block's ungated rescan late in the launch).
constexpr int kGateRankFloorZ = 5;

// Block-level control words in shared memory: the sample tiles' maxima (the
// gate's position cap) and the redo queue (the producer pops entries in order).
struct BlocksCtl {
  uint32_t tile_max[8][32];
  int rq_b[16];
  uint32_t rq_mask[16];
  int rq_valid[16];
  int rq_reserve;
  int halves_done;  // block halves (row groups) finished: rows written or queued for a redo
};

// The call's row of block b's row r.
template <class Cfg>
__device__ __forceinline__ int blocks_row(int b, int r) {
  return b * 8 + r;
}

// Queues a redo of block b's rows `mask` (one thread; none when 0) and counts
// them in *redone (the workspace header's diagnostic), then counts one of the
// block's halves (row groups) as finished.
template <class Ctl>
__device__ __forceinline__ void blocks_half_finished(Ctl* ctl, int b, uint32_t mask, int* redone) {
  if (mask) {
    redo_queue_push(ctl, b, mask, [](volatile Ctl*, int) {});
    atomicAdd(redone, __popc(mask));
  }
  __threadfence_block();
  atomicAdd(&ctl->halves_done, 1);
}

template <int kTopk_, bool kSplit_, int kHeads_ = 32>
struct Sm90FusedBlocksConfig {
  static constexpr int kTopk = kTopk_;
  static constexpr bool kSplit = kSplit_;
  static constexpr bool kLazyCheck = !kSplit_;
  static constexpr bool kAlwaysTail = !kSplit_;
  static constexpr bool kHeldDescs = !kSplit_;
  // The dense op's configuration (constants and MMA shape only).
  using Logits = Sm90LogitsConfigH<kHeads_>;
  static constexpr int kHeads = kHeads_;
  static constexpr int kHeadPasses = Logits::kHeadPasses;
  // K stages: at 32 heads 6 for whole blocks (8 measured 3% slower at the
  // headline), 8 for split blocks; at 64 heads 4 (a tile has twice the MMA
  // work and the Q buffers twice the bytes: fewer stages cover the same time).
  static constexpr int kNumStages = kHeadPasses == 1 ? (kSplit_ ? 8 : 6) : 4;
  static constexpr int kCheckTiles = 12;
  static constexpr int kBlockRows = 8;
  static constexpr int kRowsPerBlock = 8;
  static constexpr int kSegs = 8;             // candidate segments per row (its 8 warps)
  static constexpr int kMathWarpgroups = 4;
  static constexpr int kThreads = 640;
  static constexpr int kMathThreads = 512;
  // setmaxnreg: the math warps' registers; the producer warpgroup takes what
  // is left of the CTA's 640 x 96.
  static constexpr int kMathRegs = 112;
  static constexpr int kProducerRegs = (((65536 / kThreads) & ~7) * kThreads - kMathRegs * kMathThreads) / 128 / 8 * 8;
  static constexpr int kBlockKeys = 128;
  static constexpr int kQBoxRows = 2;  // the Q tensor map's box (rows of 128 B): the permuted rows' two-row boxes
  static constexpr int kKTileBytes = Logits::kKTileBytes;    // 16 KB
  static constexpr int kQTileBytes = Logits::kQTileBytes;    // 32 KB per 32 heads (8 rows)
  static constexpr int kQPassBytes = Logits::kQPassBytes;    // one head pass's sub-tile: 32 KB
  static constexpr int kScaleBytes = Logits::kScaleBytes;    // 512 B
  static constexpr int kWeightBytes = Logits::kWeightBytes;  // 1 KB per 32 heads
  static constexpr int kOffK = 0;
  static constexpr int kOffQ = kOffK + kNumStages * kKTileBytes;
  static constexpr int kOffScales = kOffQ + 2 * kQTileBytes;
  static constexpr int kOffWeights = kOffScales + kNumStages * kScaleBytes;
  static constexpr int kOffHist = kOffWeights + 2 * kWeightBytes;                    // [row][256]
  static constexpr int kOffScratch = kOffHist + 8 * 256 * 4;                          // [row][key|idx][kScratch]
  // [parity][row][seg]: consecutive publications (compaction checks, gate,
  // block end) alternate, since a warp may publish the next while a slower one
  // of its row group still reads this one (at most one ahead: the next barrier).
  static constexpr int kOffSegCnt = kOffScratch + 8 * 2 * fused_detail::kScratch * 4;
  static constexpr int kOffThr = kOffSegCnt + 2 * 8 * kSegs * 4;                      // [row] u64
  // The producer's description of a block (kSplit: of a visit), per Q buffer.
  static constexpr int kSlotInts = kSplit ? 16 : 8;
  static constexpr int kOffSlot = kOffThr + 8 * 8;                                    // [2][kSlotInts] int
  static constexpr int kOffRedo = kOffSlot + 2 * kSlotInts * 4;                       // [rg] u32
  static constexpr int kOffCtl = (kOffRedo + 2 * 2 * 4 + 15) / 16 * 16;
  // [row][16] the pair selects' exchange words; then [row] the gated rows' largest sample keys.
  static constexpr int kOffPairX = kOffCtl + (static_cast<int>(sizeof(BlocksCtl)) + 15) / 16 * 16;
  static constexpr int kOffSmax = kOffPairX + 8 * 16 * 4;
  // kLazyCheck: [parity][row][seg] the counts of the last two checks.
  static constexpr int kOffCkc = kOffSmax + 8 * 4;
  static constexpr int kOffBars = (kOffCkc + (kLazyCheck ? 2 * 8 * kSegs * 4 : 0) + 15) / 16 * 16;
  // K full / empty, Q full / empty.
  static constexpr int kNumBars = 2 * kNumStages + 4;
  // kSplit: SplitShare after the barriers (static_assert below the struct).
  static constexpr int kOffShr = (kOffBars + kNumBars * 8 + 15) / 16 * 16;
  static constexpr int kSmemBytes = kOffShr + (kSplit ? 576 : 0) + 1024;
  static_assert(kSmemBytes <= 227 * 1024 - (kSplit ? 384 : 0), "shared memory per CTA (kSplit: + fused_split_share's)");
  // kSplit: a split piece's sample tiles, at most (their entries fill the
  // last kTail slots of each segment, so the scan of the piece has cap - kTail).
  static constexpr int kSplitSampleTiles = 12;
  static constexpr int kTail = 16 * kSplitSampleTiles;
  static_assert(kProducerRegs >= 24 && kMathRegs * kMathThreads + kProducerRegs * 128 <= ((65536 / kThreads) & ~7) * kThreads,
                "setmaxnreg split exceeds the CTA's registers");
  // Candidates per (row, warp) segment: two (k + 1920) per row spread over 8
  // segments; the trigger (cap - 16 kCheckTiles) stays above a sample's 16 x
  // kMaxSampleTiles entries and above k / 8 (a compacted row).
  __host__ __device__ static constexpr int cap(int topk) { return ((topk + 1920) / 4 + 3) & ~3; }
  static_assert(cap(512) - 16 * kCheckTiles > 16 * fused_detail::kMaxSampleTiles, "sample fits under the trigger");
  static_assert(!kSplit || cap(512) - kTail - 16 * kCheckTiles > 512 / 8 + 16, "a split piece's scan room");
};

// kSplit workspace, after the header: per CTA c, 8 counter words at c * 8
// ([slot][smp rg0, smp rg1, fin rg0, fin rg1]: the split block whose first
// piece is slot `slot` of CTA c counts its pieces' published samples and
// finished scans per row group; zeroed by the launcher), then the records at
// num_sms * 8 + (c * 3 + slot) * 256 + row * 32 (kRec*: the piece's sample
// counts per segment, its final counts, its 4 largest sample-tile maxima, its
// sample tiles), then 3 candidate regions per CTA (slots 0 and 1 for the
// share's split pieces, 2 for whole blocks), each one candidate set.
constexpr int kShareCtrWords = 8;
constexpr int kShareRecWords = 3 * 256;
constexpr int kShareCtaWords = kShareCtrWords + kShareRecWords;
constexpr int kRecSample = 0, kRecFinal = 8, kRecTileMax = 16, kRecTiles = 20;
constexpr int kShareRegions = 3;
constexpr int kShareHistWords = 8 * 256;  // a region's 8 rows x 256 bins, twice (sample, final)
constexpr int kVisitWhole = 0, kVisitSample = 1, kVisitRest = 2;
constexpr int kShareMinTiles = 8;  // the fewest tiles a share gets (fewer CTAs on tiny calls)

// kSplit: the CTA's share and the split visits' per-row state (shared memory).
struct SplitShare {
  long long sh_g0, sh_count, sh_total;  // fused_split_share
  int sh_b0, sh_t0, sh_gp;
  int last[2];                          // per row group: this CTA merges the block it just finished
  uint32_t gkey[8];                     // the split visit's shared gate key per row (0: none)
  uint32_t rest_cnt[16][4];             // per math warp and row: its count after a rest visit's start
  // Per row group and Q buffer: the visit's fields after its tile loops (every
  // warp of the row group writes the same values at the visit's start; the
  // row group's warps are never a visit apart: each visit ends at its barrier).
  int vis[2][2][12];
};
static_assert(sizeof(SplitShare) <= 576, "kSplit: the shared-memory room of Sm90FusedBlocksConfig::kSmemBytes");

template <class Cfg>
inline size_t fused_blocks_workspace_bytes(int topk, int num_sms) {
  if constexpr (Cfg::kSplit)
    return kFusedHeaderBytes + size_t(num_sms) * kShareCtaWords * 4 +
           size_t(kShareRegions) * size_t(num_sms) * 8 * Cfg::kSegs * 2 * size_t(Cfg::cap(topk)) * 4 +
           size_t(kShareRegions) * size_t(num_sms) * 2 * kShareHistWords * 4;
  return kFusedHeaderBytes + size_t(num_sms) * 8 * Cfg::kSegs * 2 * size_t(Cfg::cap(topk)) * 4;
}

// Word offset (from p.ws) of this CTA's candidate region `reg` (whole blocks:
// one region, 0; split blocks: 0 and 1 for the share's split pieces, 2 for
// whole blocks).
template <class Cfg>
__device__ __forceinline__ size_t blocks_set_off(const Sm90FusedParams& p, int reg) {
  const size_t set_words = size_t(8) * Cfg::kSegs * 2 * size_t(p.cap);
  if constexpr (Cfg::kSplit)
    return size_t(gridDim.x) * kShareCtaWords + (size_t(blockIdx.x) * kShareRegions + reg) * set_words;
  else
    return size_t(blockIdx.x) * set_words;
}

// The candidate set at word offset set_off of the workspace.
__device__ __forceinline__ uint32_t* ws_cta_base(const Sm90FusedParams& p, uint32_t set_off) { return p.ws + set_off; }

// The gate's sample rank for row r (bit r of active) with m sample entries
// of its n keys (a split block's: every piece's sample): select.cuh's
// gate_rank (no cap on rho: the rank is exact over the sample's entries),
// raised to gate_rank_floor's margin (kGateRankFloorZ) where the sample was
// capped (no gate when that reaches the sample's size). 0: no gate.
template <class Cfg>
__device__ __forceinline__ uint32_t blocks_gate_rho_mn(const Sm90FusedParams& p, uint32_t m, uint32_t n, int r,
                                                         uint32_t active) {
  using namespace fused_detail;
  const uint32_t target = static_cast<uint32_t>(fused_gate_target(p.topk));
  if (!((active >> r) & 1u)) return 0u;
  uint32_t rho = gate_rank(m, n, target);
  if (rho && rho < static_cast<uint32_t>(kGateRank)) {
    rho = max(rho, gate_rank_floor(m, n, static_cast<uint32_t>(p.topk), kGateRankFloorZ));
    if (rho >= m) rho = 0;  // the margin needs more than the sample: no gate
  }
  return rho;
}

// The sample's gate g (a running threshold: a key's gate_threshold, or
// pair_tie_gate's cut by index) capped at the C-th largest of the sample
// tiles' maxima (C = min(4, ns): scores correlated with position make one
// tile's keys alike, and a gate inside the top sampled tile would keep too
// few): g when its key is below the cap, or at the cap's key with a cut by
// index (the tied key's own gate: rows whose every sampled tile tops out at
// the tied key, e.g. all-equal rows, would otherwise lose the cut and pass
// every key of the row); else the cap's key gate. One warp.
__device__ __forceinline__ uint64_t blocks_cap_gate(const BlocksCtl* ctl, int r, int ns, uint64_t g, int lane) {
  using namespace fused_detail;
  const uint32_t c = static_cast<uint32_t>(ns < kMinGateTiles ? ns : kMinGateTiles);
  const uint32_t tcap = warp_rank_key(ctl->tile_max[r], c, lane);
  return cap_gate(g, tcap);
}

// Clears row r's tile maxima and raises its threshold to the gate g (none
// when 0). One warp.
__device__ __forceinline__ void blocks_set_gate(BlocksCtl* ctl, unsigned long long* thr_s, int r, uint64_t g,
                                                int lane) {
  __syncwarp();
  ctl->tile_max[r][lane] = 0;
  __syncwarp();
  if (lane == 0 && g && thr_s[r] < g) thr_s[r] = g;
}

// The row group's compaction check (all 8 warps of row group rg, every
// kCheckTiles tiles): each warp publishes its 4 rows' segment counts; a row
// with a segment past cap - 16 kCheckTiles is compacted by all 8 warps, one
// row after another (group_compact_threshold: each warp its own segment of
// the row; a threshold at or below the row's k-th that keeps at most
// k - 1 + kScratch), each warp keeping its segment's entries at or above it
// in place. A row whose largest segment is then still above half the trigger
// (entries crowded into a few segments: the counts of the 8 warps' key
// positions differ) is re-emitted round-robin over the segments by its
// selector warp (entry p to segment p mod 8, slot p / 8; in place, see
// warp_emit over SegLanes), so each segment holds at most ceil(kept / 8). The
// lanes of a compacted row take the new count and threshold.
template <class Cfg>
__device__ __forceinline__ void blocks_check_compact(const Sm90FusedParams& p, uint32_t* ws_set, uint32_t* segcnt,
                                                       unsigned long long* thr_s, uint32_t* hist_all,
                                                       uint32_t* scratch_all, int rg,
                                                       int warp_in_wg, int seg, bool selector, uint32_t& cnt,
                                                       uint64_t& thr, uint32_t trig_red = 0) {
  using namespace fused_detail;
  constexpr int NS = Cfg::kSegs;
  const int lane = threadIdx.x & 31;
  const uint32_t trigger = static_cast<uint32_t>(p.cap - 16 * Cfg::kCheckTiles) - trig_red;
  if (lane < 4) segcnt[(4 * rg + lane) * NS + seg] = cnt;  // lane l holds row 4 rg + l's count
  ptx::named_barrier_sync(5 + rg, 256);
  // Lane l reads row 4 rg + (l & 3), segment l >> 2: the 32 counts of the group.
  const uint32_t c = segcnt[(4 * rg + (lane & 3)) * NS + (lane >> 2)];
  const uint32_t over = __ballot_sync(0xffffffffu, c > trigger);
  if (over == 0) return;  // uniform over the row group (same counts)
  // Every warp has read the counts before they are rewritten below (a warp
  // reading a compacted count would take over == 0, skip the barriers of the
  // compaction and pair its later barriers with the wrong ones).
  ptx::named_barrier_sync(5 + rg, 256);
  const uint32_t seg_stride = 2u * static_cast<uint32_t>(p.cap);
  const uint32_t k = static_cast<uint32_t>(p.topk);
#pragma unroll 1
  for (int i = 0; i < 4; ++i) {
    if ((over & (0x11111111u << i)) == 0u) continue;  // (warp-uniform)
    const int r = 4 * rg + i;
    uint32_t* kp = ws_set + size_t(r * NS + seg) * seg_stride;
    uint32_t* ip = kp + p.cap;
    const int n = static_cast<int>(__shfl_sync(0xffffffffu, cnt, i));  // lane i holds row r's count
    const uint64_t thr_r = thr_s[r];
    GroupCtx g{scratch_all + r * 2 * kScratch, 5 + rg, seg, 0};
    uint64_t t = group_compact_threshold(SegLanes{kp, ip, n, n}, g, thr_r, k, hist_all + r * 256, lane);
    t = t > thr_r ? t : thr_r;  // (a running threshold never goes down)
    const Segs sg{{kp, nullptr}, {ip, nullptr}, {n, 0}, 1};
    const int kept = warp_emit<2>(sg, t, lane, [&](int at, uint32_t key, uint32_t idx) {
      __stcg(kp + at, key);
      __stcg(ip + at, idx);
    });
    if (lane == 0) segcnt[r * NS + seg] = static_cast<uint32_t>(kept);
    __threadfence_block();
    const uint4 q = group_reduce(g, make_uint4(static_cast<uint32_t>(kept), 0u, static_cast<uint32_t>(kept), 0u), lane);
    if (q.z > trigger / 2) {  // crowded: round-robin over the 8 segments (uniform: the same q in every warp)
      if (selector && warp_in_wg == i) {
        uint32_t* seg0 = ws_set + size_t(r * NS) * seg_stride;
        const SegLanes sl = make_seg_lanes(seg0, seg_stride, static_cast<uint32_t>(p.cap), segcnt + r * NS, NS, lane);
        const int all = warp_emit(sl, t, lane, [&](int at, uint32_t key, uint32_t idx) {
          uint32_t* d = seg0 + size_t(at & (NS - 1)) * seg_stride + (at >> 3);
          __stcg(d, key);
          __stcg(d + p.cap, idx);
        });
        __syncwarp();
        if (lane < NS) segcnt[r * NS + lane] = static_cast<uint32_t>((all + NS - 1 - lane) / NS);
        __threadfence_block();
      }
      ptx::named_barrier_sync(5 + rg, 256);
    }
    if (seg == 0 && lane == 0) {
      thr_s[r] = t;
      fused_diag_count(p.counter, kFusedCompactWord);
    }
  }
  ptx::named_barrier_sync(5 + rg, 256);
  if (over & (0x11111111u << (lane & 3))) {  // this lane's row was compacted: new count and threshold
    const int my_row = 4 * rg + (lane & 3);
    cnt = segcnt[my_row * NS + seg];
    thr = thr_s[my_row];
  }
}

// The call the tile loops make every kCheckTiles tiles: not inlined, so the
// compaction's code and the values only it needs (shared-memory pointers, the
// lane's role) stay out of the tile loop's registers, which are at their cap
// (64 accumulators + 32 weights); everything is re-derived here from the
// thread index, the kernel parameters and the candidate set. Returns the lane's
// (count, threshold low, threshold high).
template <class Cfg>
__device__ __noinline__ uint4 blocks_check_call(const Sm90FusedParams* pp, int qb, int parity, uint32_t cnt,
                                                  uint32_t thr_lo, uint32_t thr_hi) {
  const Sm90FusedParams& p = *pp;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int rg = wg >> 1, kg = wg & 1, warp_in_wg = (tid >> 5) & 3;
  int reg = 0;
  if constexpr (Cfg::kSplit)  // the visit's region is in this warp's vis slot of Q buffer qb
    reg = reinterpret_cast<const SplitShare*>(smem + Cfg::kOffShr)->vis[rg][qb][3];
  uint32_t* ws_set = p.ws + blocks_set_off<Cfg>(p, reg);
  uint32_t* segcnt = reinterpret_cast<uint32_t*>(smem + Cfg::kOffSegCnt) + parity * 8 * Cfg::kSegs;
  unsigned long long* thr_s = reinterpret_cast<unsigned long long*>(smem + Cfg::kOffThr);
  uint64_t thr = (static_cast<uint64_t>(thr_hi) << 32) | thr_lo;
  // kSplit: a split piece's scan has cap - kTail slots per segment (its sample is in the tail).
  const uint32_t trig_red = Cfg::kSplit && reg < 2 ? static_cast<uint32_t>(Cfg::kTail) : 0u;
  const long long t0 = fused_diag_clock();
  blocks_check_compact<Cfg>(p, ws_set, segcnt, thr_s, reinterpret_cast<uint32_t*>(smem + Cfg::kOffHist),
                            reinterpret_cast<uint32_t*>(smem + Cfg::kOffScratch), rg, warp_in_wg, kg * 4 + warp_in_wg,
                            kg == 0, cnt, thr, trig_red);
  fused_diag_cycles(p.counter, kDiagCheck, t0);
  return make_uint4(cnt, static_cast<uint32_t>(thr), static_cast<uint32_t>(thr >> 32), 0u);
}

// The row a pair warp holds in its row group (row 4 rg + warp_in_wg of block
// b; kg = its half) and that row's state in candidate region `reg` (block
// counts at publication parity `parity`), derived from the thread index and
// the parameters: what the non-inlined pair calls need.
template <class Cfg>
struct BlocksPairRow {
  uint8_t* smem;
  int lane, kg, r, row;
  uint32_t seg_stride;
  const uint32_t* seg0;    // the row's segment 0 (keys; indices at + cap)
  const uint32_t* segcnt;  // its 8 segment counts
  uint32_t *hist, *sk, *si;
  __device__ __forceinline__ BlocksPairRow(const Sm90FusedParams& p, int reg, int parity, int b) {
    using namespace fused_detail;
    constexpr int NS = Cfg::kSegs;
    extern __shared__ uint8_t smem_raw[];
    smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
    const int tid = threadIdx.x;
    lane = tid & 31;
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    kg = wg & 1;
    r = 4 * (wg >> 1) + ((tid >> 5) & 3);
    row = blocks_row<Cfg>(b, r);
    seg_stride = 2u * static_cast<uint32_t>(p.cap);
    seg0 = p.ws + blocks_set_off<Cfg>(p, reg) + size_t(r * NS) * seg_stride;
    segcnt = reinterpret_cast<const uint32_t*>(smem + Cfg::kOffSegCnt) + parity * 8 * NS + r * NS;
    hist = reinterpret_cast<uint32_t*>(smem + Cfg::kOffHist) + r * 256;
    sk = reinterpret_cast<uint32_t*>(smem + Cfg::kOffScratch) + r * 2 * kScratch;
    si = sk + kScratch;
  }
  // This warp's half of the row (8 lanes per segment) and the whole row (one warp).
  __device__ __forceinline__ fused_detail::SegLanes half_segs(const Sm90FusedParams& p) const {
    return fused_detail::make_pair_segs(seg0 + size_t(kg * 4) * seg_stride, seg_stride, static_cast<uint32_t>(p.cap),
                                        segcnt + kg * 4, lane);
  }
  __device__ __forceinline__ fused_detail::SegLanes all_segs(const Sm90FusedParams& p) const {
    return fused_detail::make_seg_lanes(seg0, seg_stride, static_cast<uint32_t>(p.cap), segcnt, Cfg::kSegs, lane);
  }
  __device__ __forceinline__ fused_detail::PairCtx ctx() const {
    return fused_detail::PairCtx{reinterpret_cast<uint32_t*>(smem + Cfg::kOffPairX) + r * 16, 8 + r, kg, 0};
  }
};

// The sample gate of row 4 rg + warp_in_wg by both warps that hold it
// (blocks_gate_rho_mn's rank; pair_gate_fast, else the exact pair select, or
// the tied key under heavy ties at the rank); the first warp (key group 0) caps it,
// sets thr_s, records the row's largest sample key and clears the tile
// maxima. Not inlined (as blocks_pair_end_call). Returns whether the row is
// gated (the first warp's answer is the row's).
template <class Cfg>
__device__ __noinline__ bool blocks_gate_pair_call(const Sm90FusedParams* pp, int reg, int parity, int b,
                                                   uint32_t active, int ns) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  const BlocksPairRow<Cfg> rw(p, reg, parity, b);
  const int r = rw.r, lane = rw.lane, kg = rw.kg;
  unsigned long long* thr_s = reinterpret_cast<unsigned long long*>(rw.smem + Cfg::kOffThr);
  BlocksCtl* ctl = reinterpret_cast<BlocksCtl*>(rw.smem + Cfg::kOffCtl);
  const long long t0 = fused_diag_clock();
  // The row's sample entries (its 8 segment counts; lane < 8 reads one) and keys.
  uint32_t m = lane < 8 ? rw.segcnt[lane] : 0u;
  m = __reduce_add_sync(0xffffffffu, m);
  int start = 0;
  const uint32_t n = rw.row < p.rows ? static_cast<uint32_t>(row_length(p, rw.row, &start)) : 0u;
  const uint32_t rho = blocks_gate_rho_mn<Cfg>(p, m, n, r, active);
  uint64_t g = 0;
  if (rho) {
    PairCtx pc = rw.ctx();
    const uint32_t smax = __reduce_max_sync(0xffffffffu, ctl->tile_max[r][lane]);
    const uint32_t fast = pair_gate_fast(rw.half_segs(p), pc, rho, smax, rw.hist, lane);  // (0: run the exact select)
    g = gate_threshold(fast);
    if (fast == 0) {  // the exact rho-th composite; heavy ties at it cut the gate by index
      uint64_t th = 0;
      uint32_t c_unused = 0;
      pair_select(rw.half_segs(p), pc, 0, rho, rw.hist, rw.sk, rw.si, lane, &th, &c_unused);
      int lo, hi;
      const int nt = block_span<8, Cfg::kBlockKeys>(Sm90LogitsParams{p.starts, p.ends, nullptr, 0, p.rows, p.keys}, b,
                                                    lo, hi);
      g = pair_tie_gate(rw.half_segs(p), pc, th, rho, m, n, static_cast<uint32_t>(start), static_cast<uint32_t>(lo), nt,
                        ns, lane);
      if (kg == 0 && lane == 0) {
        fused_diag_count(p.counter, kFusedExactGateWord);
        if (static_cast<uint32_t>(g) != 0u) fused_diag_count(p.counter, kFusedTieCutGateWord);
      }
    }
    if (kg == 0) g = blocks_cap_gate(ctl, r, ns, g, lane);
  }
  if (kg == 0) {
    {  // the row's largest sample key (0: not gated)
      const uint32_t mx = __reduce_max_sync(0xffffffffu, ctl->tile_max[r][lane]);
      if (lane == 0) reinterpret_cast<uint32_t*>(rw.smem + Cfg::kOffSmax)[r] = g ? mx : 0u;
    }
    blocks_set_gate(ctl, thr_s, r, g, lane);
  }
  fused_diag_cycles(p.counter, kDiagGate, t0);
  return g != 0;
}

// The block-end select of row 4 rg + warp_in_wg of block b by both warps that
// hold it (the caller checks that the row is active and in range); not
// inlined, so its values stay out of the tile loops' registers (everything is
// re-derived from the thread index, the parameters and the candidate region
// `reg`, whose block-end counts are at publication parity `parity`). Returns
// whether the row is safe (false: a gated row with too few candidates, to be
// redone; the first warp's answer is the row's).
template <class Cfg>
__device__ __noinline__ bool blocks_pair_end_call(const Sm90FusedParams* pp, int reg, int parity, int b, bool gated) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  const long long t0 = fused_diag_clock();
  const BlocksPairRow<Cfg> rw(p, reg, parity, b);
  const int r = rw.r, row = rw.row, lane = rw.lane, kg = rw.kg;
  uint8_t* smem = rw.smem;
  uint32_t *hist = rw.hist, *sk = rw.sk, *si = rw.si;
  const uint64_t thr = reinterpret_cast<const unsigned long long*>(smem + Cfg::kOffThr)[r];
  const SegLanes ps = rw.half_segs(p);
  PairCtx pc = rw.ctx();
  int start;
  const int n = row_length(p, row, &start);
  const uint32_t k = static_cast<uint32_t>(p.topk);
  const uint32_t need = min(k, static_cast<uint32_t>(n));
  int* orow = p.out + size_t(row) * k;
  uint32_t cands = 0;
  const uint32_t smax = reinterpret_cast<const volatile uint32_t*>(smem + Cfg::kOffSmax)[r];
  auto outf = [&](int at, int v, uint32_t) { orow[at] = v; };
  const int res = pair_finish_row_gated(ps, pc, thr, smax, k, need, gated, start, hist, sk, si, lane, &cands, outf);
  bool ok = res > 0;
  if (res < 0 && kg == 0) {  // a compacted row with at most k eligible: one warp
    if (lane == 0) fused_diag_count(p.counter, kFusedOneWarpEndWord);
    ok = warp_finish_row(rw.all_segs(p), thr, k, need, gated, start, hist, sk, si, lane, &cands,
                         [&](int at, int v, uint32_t) { orow[at] = v; });
  }
  fused_diag_cycles(p.counter, kDiagEnd, t0);
  return ok;
}

}  // namespace mqa_topk
