// sm90_fused_mqa_topk_v3: the fused FP8 MQA logits + exact per-row top-k on
// the dense op's main loop (issue 9 / 10: "the fused kernel on a v2 main
// loop"). Hopper (sm_90a), torch-free.
//
// Logits: the structure of sm90_fp8_mqa_logits_v2.cuh (Sm90LogitsV2Default):
// 8-row blocks on four math warpgroups at wgmma N = 128 ("row groups":
// warpgroup wg = 2 rg + kg takes rows [4 rg, +4) x keys [64 kg, +64) of a
// 128-key tile), setmaxnreg 112 / 32, the block's weights in registers, the
// lean tile path (warp-uniform 32-bit descriptor words), the same per-element
// arithmetic and reduction tree (logits_epilogue_reduce_w), so every logit is
// bitwise equal to the dense op's and the index sets are identical.
//
// Selection (the v2 design of sm90_fused_mqa_topk.cuh: sample gate, fixed-gate
// scan, one exact select per row at the block end, redo of unsafe rows),
// rebuilt for this structure:
// - Row groups are independent: every cross-warp step (gate, compaction
//   check, block end) is a named barrier of the row group's 8 warps; the two
//   row groups share only the producer, the K ring and the Q buffers.
// - Per-warp candidate segments: after the reduce-scatter a lane holds one row
//   (4 rg + quad) and two keys of a tile, so warp w of warpgroup (rg, kg)
//   sees 16 keys of every tile for each of its 4 rows. It appends what passes
//   its lane's threshold to its own segment of the row (segment kg * 4 + w of
//   8), slots from its own ballot: no per-tile exchange, no barrier, and the
//   contents are deterministic (tile order, then lane order).
// - Compaction (rare: ties at the gate, relu-saturated rows, redone rows): every
//   kCheckTiles tiles the row group compares its segment counts with
//   cap - 16 kCheckTiles (what one segment can take before the next check);
//   for a row past it, one warp selects the exact k-th composite over the
//   row's 8 segments (a safe running threshold: the k-th largest of a subset
//   of the row) and re-emits what is at or above it round-robin over the 8
//   segments (entry p to segment p mod 8, slot p / 8: in place, since a slot
//   is written only after the traversal has read it), so every segment ends
//   far below the trigger whatever the distribution over warps.
// - Gate: the sample tiles' candidates are appended with no threshold; each
//   thread keeps its 4 largest keys of the row (64 threads x 4 = the row's
//   256-key list) and the tile maxima go to shared memory; one warp per row
//   ranks the gate (fused_select.cuh: gate_rank, warp_gate_key); each warp
//   then drops its sample entries below it (in place, its own segments).
// - Block end: one warp per row (warp r of the row group's first warpgroup)
//   runs warp_finish_row over the row's 8 segments (fused_select.cuh,
//   SegLanes: 4 lanes per segment, as many loads in flight as over one).
//   kSets = 2 keeps two candidate sets, so the second warpgroup of each row
//   group starts the next block while the first selects.
// Work, tile walk, redo queue and workspace header as in sm90_fused_mqa_topk.cuh.
// Workspace: 128-byte header + kSets x num_sms x 8 rows x 8 segments x
// (keys, indices) x cap words, cap = (k + 1920) / 4 rounded to 4: the same
// bytes as the v2 kernel's per row.
#pragma once

#include <utility>
#include <type_traits>

#include "fused_select.cuh"
#include "sm90_fp8_mqa_logits_v2.cuh"
#include "sm90_fused_mqa_topk.cuh"

namespace mqa_topk {

// The gate's rank floor: at least mu + z sqrt(mu) sample entries above it,
// mu the entries expected at or above the row's k-th (fused_select.cuh,
// gate_rank_floor), where the sample is capped (fused_sample_tiles: long rows,
// whose redo would be a long block's ungated rescan late in the launch).
constexpr int kGateRankFloorZ = 5;

// Block-level control words in shared memory: the sample tiles' maxima (the
// gate's position cap) and the redo queue (the producer pops entries in order).
struct FusedV3Ctl {
  uint32_t tile_max[8][32];
  int rq_b[16];
  uint32_t rq_mask[16];
  int rq_valid[16];
  int rq_reserve;
  int halves_done;  // block halves (row groups) finished: rows written or queued for a redo
  int unused;
};

// The call's row of block b's row r.
template <class Cfg>
__device__ __forceinline__ int fused_v3_row(int b, int r) {
  return b * 8 + r;
}

// Queues a redo of block b's rows `mask` (one thread; none when 0), then counts
// `halves` of the block's halves (row groups) as finished.
template <class Ctl>
__device__ __forceinline__ void fused_v3_half_finished(Ctl* ctl, int b, uint32_t mask, int halves = 1) {
  if (mask) redo_queue_push(ctl, b, mask, [](volatile Ctl*, int) {});
  __threadfence_block();
  atomicAdd(&ctl->halves_done, halves);
}

template <int kTopk_, bool kSplit_>
struct Sm90FusedBlocksConfig {
  static constexpr int kFixedTopk = kTopk_;
  static constexpr bool kShares = kSplit_;
  static constexpr bool kLazyCheck = !kSplit_;
  static constexpr bool kAlwaysTail = !kSplit_;
  static constexpr bool kHeldDescs = !kSplit_;
  // The dense op's configuration (constants and MMA shape only).
  using Logits = Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, true, 2, true, true>;
  static constexpr int kNumStages = 8;
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
  static constexpr int kQTileBytes = Logits::kQTileBytes;    // 32 KB (8 rows x 32 heads)
  static constexpr int kScaleBytes = Logits::kScaleBytes;    // 512 B
  static constexpr int kWeightBytes = Logits::kWeightBytes;  // 1 KB
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
  // The producer's description of a block (kShares: of a visit), per Q buffer.
  static constexpr int kSlotInts = kShares ? 16 : 8;
  static constexpr int kOffSlot = kOffThr + 8 * 8;                                    // [2][kSlotInts] int
  static constexpr int kOffRedo = kOffSlot + 2 * kSlotInts * 4;                       // [rg] u32
  static constexpr int kOffCtl = (kOffRedo + 2 * 2 * 4 + 15) / 16 * 16;
  // [row][16] the pair selects' exchange words; then [row] the gated rows' largest sample keys.
  static constexpr int kOffPairX = kOffCtl + (static_cast<int>(sizeof(FusedV3Ctl)) + 15) / 16 * 16;
  static constexpr int kOffSmax = kOffPairX + 8 * 16 * 4;
  // kLazyCheck: [parity][row][seg] the counts of the last two checks.
  static constexpr int kOffCkc = kOffSmax + 8 * 4;
  static constexpr int kOffBars = (kOffCkc + (kLazyCheck ? 2 * 8 * kSegs * 4 : 0) + 15) / 16 * 16;
  // K full / empty, Q full / empty.
  static constexpr int kNumBars = 2 * kNumStages + 4;
  // kShares: FusedV3Shr after the barriers (static_assert below the struct).
  static constexpr int kOffShr = (kOffBars + kNumBars * 8 + 15) / 16 * 16;
  static constexpr int kSmemBytes = kOffShr + (kShares ? 576 : 0) + 1024;
  static_assert(kSmemBytes <= 227 * 1024 - (kShares ? 384 : 0), "shared memory per CTA (kShares: + fused_split_share's)");
  // kShares: a split piece's sample tiles, at most (their entries fill the
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
  static_assert(!kShares || cap(512) - kTail - 16 * kCheckTiles > 512 / 8 + 16, "a split piece's scan room");
};

// kShares workspace, after the header: per CTA c, 8 counter words at c * 8
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

// kShares: the CTA's share and the split visits' per-row state (shared memory).
struct FusedV3Shr {
  long long sh_g0, sh_count, sh_total;  // fused_split_share
  int sh_b0, sh_t0, sh_gp;
  int unused0;
  int last[2];                          // per row group: this CTA merges the block it just finished
  int unused1[10];
  uint32_t gkey[8];                     // the split visit's shared gate key per row (0: none)
  uint32_t rest_cnt[16][4];             // per math warp and row: its count after a rest visit's start
  // Per row group and Q buffer: the visit's fields after its tile loops (every
  // warp of the row group writes the same values at the visit's start; the
  // row group's warps are never a visit apart: each visit ends at its barrier).
  int vis[2][2][12];
};
static_assert(sizeof(FusedV3Shr) <= 576, "kShares: the shared-memory room of Sm90FusedBlocksConfig::kSmemBytes");

template <class Cfg>
inline size_t fused_v3_workspace_bytes(int topk, int num_sms) {
  if constexpr (Cfg::kShares)
    return kFusedHeaderBytes + size_t(num_sms) * kShareCtaWords * 4 +
           size_t(kShareRegions) * size_t(num_sms) * 8 * Cfg::kSegs * 2 * size_t(Cfg::cap(topk)) * 4 +
           size_t(kShareRegions) * size_t(num_sms) * 2 * kShareHistWords * 4;
  return kFusedHeaderBytes + size_t(num_sms) * 8 * Cfg::kSegs * 2 * size_t(Cfg::cap(topk)) * 4;
}

// Word offset (from p.ws) of this CTA's candidate set cs (kShares: region cs).
template <class Cfg>
__device__ __forceinline__ size_t fused_v3_set_off(const Sm90FusedParams& p, int cs) {
  const size_t set_words = size_t(8) * Cfg::kSegs * 2 * size_t(p.cap);
  if constexpr (Cfg::kShares)
    return size_t(gridDim.x) * kShareCtaWords + (size_t(blockIdx.x) * kShareRegions + cs) * set_words;
  else
    return (size_t(blockIdx.x) + cs) * set_words;
}

// The candidate set at word offset set_off of the workspace.
__device__ __forceinline__ uint32_t* ws_cta_base(const Sm90FusedParams& p, uint32_t set_off) { return p.ws + set_off; }

template <class Cfg>
__device__ __forceinline__ uint32_t fused_v3_gate_rho_mn(const Sm90FusedParams& p, uint32_t m, uint32_t n, int r,
                                                         uint32_t active);

// The gate's sample rank for row r of block b (fused_v3_gate's rule): the
// row's sample entries m are its 8 segment counts cnt[0 .. 8) (lane < 8 reads
// one); gate_rank's rule without its 256-key list limit (the rank is exact
// over the sample's entries): split_gate_rank with no cap on rho, raised to
// gate_rank_floor's margin when Cfg::kRankFloorZ (no gate when that reaches
// the sample's size). 0: no gate.
template <class Cfg>
__device__ __forceinline__ uint32_t fused_v3_gate_rho(const Sm90FusedParams& p, const uint32_t* cnt, int row, int r,
                                                      uint32_t active, int lane) {
  using namespace fused_detail;
  int start_unused;
  const uint32_t n = row < p.rows ? static_cast<uint32_t>(row_length(p, row, &start_unused)) : 0u;
  uint32_t m = lane < 8 ? cnt[lane] : 0u;
  m = __reduce_add_sync(0xffffffffu, m);
  return fused_v3_gate_rho_mn<Cfg>(p, m, n, r, active);
}

// fused_v3_gate_rho's rule for m sample entries of a row of n keys (kShares:
// the sample of every piece of a split block).
template <class Cfg>
__device__ __forceinline__ uint32_t fused_v3_gate_rho_mn(const Sm90FusedParams& p, uint32_t m, uint32_t n, int r,
                                                         uint32_t active) {
  using namespace fused_detail;
  const uint32_t target = static_cast<uint32_t>(p.target > 0 ? p.target : fused_gate_target(p.topk));
  if (p.probe == 1 || !((active >> r) & 1u)) return 0u;
  uint32_t rho = split_gate_rank(m, n, target, 0xffffffffu);
  if (rho && rho < static_cast<uint32_t>(kGateRank)) {
    rho = max(rho, gate_rank_floor(m, n, static_cast<uint32_t>(p.topk), kGateRankFloorZ));
    if (rho >= m) rho = 0;  // the margin needs more than the sample: no gate
  }
  return rho;
}

// The gate key gk of the sample's select capped at the C-th largest of the
// sample tiles' maxima (C = min(4, ns); see fused_v3_gate). One warp.
__device__ __forceinline__ uint32_t fused_v3_cap_gate(const FusedV3Ctl* ctl, int r, int ns, uint32_t gk, int lane) {
  using namespace fused_detail;
  const uint32_t c = static_cast<uint32_t>(ns < kMinGateTiles ? ns : kMinGateTiles);
  const uint32_t tcap = warp_rank_key<32>(ctl->tile_max[r], c, lane);
  return gk < tcap ? gk : tcap;
}

// Clears row r's tile maxima and sets its threshold to the gate gk (none when
// 0; probe 2 counts it). One warp.
__device__ __forceinline__ void fused_v3_set_gate(const Sm90FusedParams& p, FusedV3Ctl* ctl, unsigned long long* thr_s,
                                                  unsigned long long* stats, int r, uint32_t gk, int lane) {
  using namespace fused_detail;
  __syncwarp();
  ctl->tile_max[r][lane] = 0;
  __syncwarp();
  if (lane == 0 && gk) {
    const unsigned long long g = gate_threshold(gk);
    if (thr_s[r] < g) thr_s[r] = g;
    if (p.probe == 2) atomicAdd(stats + 9, 1ull);
  }
}

// The row group's compaction check (all 8 warps of row group rg, every
// kCheckTiles tiles): each warp publishes its 4 rows' segment counts; for a
// row with a segment past cap - 16 kCheckTiles, its selector warp finds the
// exact k-th composite over the row's 8 segments (at or above the row's
// threshold; a safe running threshold) and re-emits every entry at or above it
// round-robin over the segments (entry p to segment p mod 8, slot p / 8; in
// place, see warp_emit over SegLanes), so each segment then holds at most
// ceil(k / 8). The lanes of a compacted row take the new count and threshold.
template <class Cfg>
__device__ __forceinline__ void fused_v3_check_compact(const Sm90FusedParams& p, uint32_t* ws_set, uint32_t* segcnt,
                                                       unsigned long long* thr_s, uint32_t* hist_all,
                                                       uint32_t* scratch_all, unsigned long long* stats, int rg,
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
  // Every warp has read the counts before a selector rewrites them below (a
  // warp reading a compacted count would take over == 0, skip the barrier
  // after the compaction and pair its later barriers with the wrong ones).
  ptx::named_barrier_sync(5 + rg, 256);
  const long long t_c = clock64();
  const int sel_row = 4 * rg + warp_in_wg;
  if (selector && (over & (0x11111111u << warp_in_wg))) {
    const uint32_t seg_stride = 2u * static_cast<uint32_t>(p.cap);
    uint32_t* seg0 = ws_set + size_t(sel_row * NS) * seg_stride;
    uint32_t* hist = hist_all + sel_row * 256;
    uint32_t* sk = scratch_all + sel_row * 2 * kScratch;
    uint32_t* si = sk + kScratch;
    const SegLanes sl = make_seg_lanes(seg0, seg_stride, static_cast<uint32_t>(p.cap), segcnt + sel_row * NS, NS,
                                       lane);
    uint32_t c_row = 0;
    const uint64_t th =
        warp_select_lean(sl, thr_s[sel_row], static_cast<uint32_t>(p.topk), hist, sk, si, lane, nullptr, &c_row);
    const int kept = warp_emit(sl, th, lane, [&](int at, uint32_t key, uint32_t idx) {
      uint32_t* d = seg0 + size_t(at & (NS - 1)) * seg_stride + (at >> 3);
      __stcg(d, key);
      __stcg(d + p.cap, idx);
    });
    __syncwarp();
    if (lane < NS) segcnt[sel_row * NS + lane] = static_cast<uint32_t>((kept + NS - 1 - lane) / NS);
    if (lane == 0) {
      thr_s[sel_row] = th;
      if (p.probe == 2) {
        atomicAdd(stats + 0, 1ull);
        atomicAdd(stats + 1, static_cast<unsigned long long>(c_row));
      }
    }
    __threadfence_block();
  }
  ptx::named_barrier_sync(5 + rg, 256);
  if (over & (0x11111111u << (lane & 3))) {  // this lane's row was compacted: new count and threshold
    const int my_row = 4 * rg + (lane & 3);
    cnt = segcnt[my_row * NS + seg];
    thr = thr_s[my_row];
  }
  if (p.probe == 2 && lane == 0) atomicAdd(stats + 3, static_cast<unsigned long long>(clock64() - t_c));
}

// The call the tile loops make every kCheckTiles tiles: not inlined, so the
// compaction's code and the values only it needs (shared-memory pointers, the
// lane's role) stay out of the tile loop's registers, which are at their cap
// (64 accumulators + 32 weights); everything is re-derived here from the
// thread index, the kernel parameters and the candidate set. Returns the lane's
// (count, threshold low, threshold high).
template <class Cfg>
__device__ __noinline__ uint4 fused_v3_check_call(const Sm90FusedParams* pp, int cs, int parity, uint32_t cnt,
                                                  uint32_t thr_lo, uint32_t thr_hi) {
  const Sm90FusedParams& p = *pp;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int rg = wg >> 1, kg = wg & 1, warp_in_wg = (tid >> 5) & 3;
  const size_t set_words = size_t(8) * Cfg::kSegs * 2 * size_t(p.cap);
  (void)set_words;
  if constexpr (Cfg::kShares)  // cs is the Q buffer: the visit's region is in this warp's vis slot
    cs = reinterpret_cast<const FusedV3Shr*>(smem + Cfg::kOffShr)->vis[rg][cs][3];
  uint32_t* ws_set = p.ws + fused_v3_set_off<Cfg>(p, cs);
  const int ss = Cfg::kShares ? 0 : cs;  // kShares: cs is the region; one set of shared-memory state
  uint32_t* segcnt = reinterpret_cast<uint32_t*>(smem + Cfg::kOffSegCnt) + (ss * 2 + parity) * 8 * Cfg::kSegs;
  unsigned long long* thr_s = reinterpret_cast<unsigned long long*>(smem + Cfg::kOffThr) + ss * 8;
  uint64_t thr = (static_cast<uint64_t>(thr_hi) << 32) | thr_lo;
  // kShares: a split piece's scan has cap - kTail slots per segment (its sample is in the tail).
  const uint32_t trig_red = Cfg::kShares && cs < 2 ? static_cast<uint32_t>(Cfg::kTail) : 0u;
  fused_v3_check_compact<Cfg>(p, ws_set, segcnt, thr_s, reinterpret_cast<uint32_t*>(smem + Cfg::kOffHist),
                              reinterpret_cast<uint32_t*>(smem + Cfg::kOffScratch),
                              reinterpret_cast<unsigned long long*>(p.counter) + 1, rg, warp_in_wg,
                              kg * 4 + warp_in_wg, kg == 0, cnt, thr, trig_red);
  return make_uint4(cnt, static_cast<uint32_t>(thr), static_cast<uint32_t>(thr >> 32), 0u);
}

// The row a pair warp holds in its row group (row 4 rg + warp_in_wg of block
// b; kg = its half) and that row's state in candidate set cs (block counts at
// publication parity `parity`), derived from the thread index and the
// parameters: what the non-inlined pair calls need.
template <class Cfg>
struct FusedV3PairRow {
  uint8_t* smem;
  int lane, kg, r, row;
  uint32_t seg_stride;
  const uint32_t* seg0;    // the row's segment 0 (keys; indices at + cap)
  const uint32_t* segcnt;  // its 8 segment counts
  uint32_t *hist, *sk, *si;
  unsigned long long* stats;
  __device__ __forceinline__ FusedV3PairRow(const Sm90FusedParams& p, int cs, int parity, int b) {
    using namespace fused_detail;
    constexpr int NS = Cfg::kSegs;
    extern __shared__ uint8_t smem_raw[];
    smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
    const int tid = threadIdx.x;
    lane = tid & 31;
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    kg = wg & 1;
    r = 4 * (wg >> 1) + ((tid >> 5) & 3);
    row = fused_v3_row<Cfg>(b, r);
    const size_t set_words = size_t(8) * NS * 2 * size_t(p.cap);
    seg_stride = 2u * static_cast<uint32_t>(p.cap);
    (void)set_words;
    seg0 = p.ws + fused_v3_set_off<Cfg>(p, cs) + size_t(r * NS) * seg_stride;
    segcnt = reinterpret_cast<const uint32_t*>(smem + Cfg::kOffSegCnt) + ((Cfg::kShares ? 0 : cs) * 2 + parity) * 8 * NS +
             r * NS;
    hist = reinterpret_cast<uint32_t*>(smem + Cfg::kOffHist) + r * 256;
    sk = reinterpret_cast<uint32_t*>(smem + Cfg::kOffScratch) + r * 2 * kScratch;
    si = sk + kScratch;
    stats = reinterpret_cast<unsigned long long*>(p.counter) + 1;
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

// kPairGate: the gate of row 4 rg + warp_in_wg (fused_v3_gate's rule) by both
// warps that hold it; the first warp (key group 0) caps it, sets thr_s and
// clears the tile maxima. Not inlined (as fused_v3_pair_end_call). Returns
// whether the row is gated (the first warp's answer is the row's).
template <class Cfg>
__device__ __noinline__ bool fused_v3_gate_pair_call(const Sm90FusedParams* pp, int cs, int parity, int b,
                                                     uint32_t active, int ns) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  const FusedV3PairRow<Cfg> rw(p, cs, parity, b);
  const int r = rw.r, lane = rw.lane, kg = rw.kg;
  unsigned long long* thr_s = reinterpret_cast<unsigned long long*>(rw.smem + Cfg::kOffThr) + (Cfg::kShares ? 0 : cs) * 8;
  FusedV3Ctl* ctl = reinterpret_cast<FusedV3Ctl*>(rw.smem + Cfg::kOffCtl);
  const uint32_t rho = fused_v3_gate_rho<Cfg>(p, rw.segcnt, rw.row, r, active, lane);
  uint32_t gk = 0;
  if (rho) {
    PairCtx pc = rw.ctx();
    uint64_t th = 0;
    uint32_t c_unused = 0;
    const uint32_t smax = __reduce_max_sync(0xffffffffu, ctl->tile_max[r][lane]);
    const uint32_t fast = pair_gate_fast(rw.half_segs(p), pc, rho, smax, rw.hist, lane);  // (0: run the exact select)
    th = static_cast<uint64_t>(fast) << 32;
    if (fast == 0 && !pair_select(rw.half_segs(p), pc, 0, rho, rw.hist, rw.sk, rw.si, lane, &th, &c_unused) && kg == 0)
      th = warp_select_lean(rw.all_segs(p), 0, rho, rw.hist, rw.sk, rw.si, lane);  // heavy ties: one warp
    if (kg == 0) gk = fused_v3_cap_gate(ctl, r, ns, static_cast<uint32_t>(th >> 32), lane);
  }
  if (kg == 0) {
    {  // the row's largest sample key (0: not gated)
      const uint32_t mx = __reduce_max_sync(0xffffffffu, ctl->tile_max[r][lane]);
      if (lane == 0) reinterpret_cast<uint32_t*>(rw.smem + Cfg::kOffSmax)[r] = gk ? mx : 0u;
    }
    fused_v3_set_gate(p, ctl, thr_s, rw.stats, r, gk, lane);
  }
  return gk != 0;
}

// kPairSelect: the block-end select of row 4 rg + warp_in_wg of block b by
// both warps that hold it (the caller checks that the row is active and in
// range); not inlined, so its values stay out of the tile loops' registers
// (everything is re-derived from the thread index, the parameters and the
// candidate set cs, whose block-end counts are at publication parity `parity`).
// Returns whether the row is safe (false: a gated row with too few candidates,
// to be redone; the first warp's answer is the row's).
template <class Cfg>
__device__ __noinline__ bool fused_v3_pair_end_call(const Sm90FusedParams* pp, int cs, int parity, int b, bool gated) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  const FusedV3PairRow<Cfg> rw(p, cs, parity, b);
  const int r = rw.r, row = rw.row, lane = rw.lane, kg = rw.kg;
  uint8_t* smem = rw.smem;
  uint32_t *hist = rw.hist, *sk = rw.sk, *si = rw.si;
  unsigned long long* stats = rw.stats;
  const uint64_t thr = reinterpret_cast<const unsigned long long*>(smem + Cfg::kOffThr)[(Cfg::kShares ? 0 : cs) * 8 + r];
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
  const int res = pair_finish_row_gated<decltype(outf)&, PairNoMark, 4>(ps, pc, thr, smax, k, need, gated, start, hist,
                                                                       sk, si, lane, &cands, outf);
  bool ok = res > 0;
  if (res < 0 && kg == 0) {  // heavy ties at the k-th key (or a compacted row with at most k): one warp
    ok = warp_finish_row<true>(rw.all_segs(p), thr, k, need, gated, start, hist, sk, si, lane, &cands,
                               [&](int at, int v, uint32_t) { orow[at] = v; });
  }
  if (kg == 0 && p.probe == 2 && lane == 0) {
    atomicAdd(stats + 4, static_cast<unsigned long long>(cands));
    atomicAdd(stats + 13, 1ull);
    if (!ok) atomicAdd(stats + 8, 1ull);
    if (res < 0) atomicAdd(stats + 10, 1ull);
  }
  return ok;
}

// ---- v3 shares (kShares): split blocks across CTAs -----------------------------
// The producer turns the CTA's share (fused_split_share: equal contiguous
// shares of the call's tiles) into visits (slot words of a Q buffer: b, the
// piece's first key, its tiles np, the walk stride, its sample tiles, active
// rows, kind, the walk positions [t_begin, t_end) of this visit, the region,
// and for a split block its first CTA c0, that CTA's slot slot0 and its
// pieces S). A split piece is visited twice: kVisitSample (its first ns walk
// positions into the tails of region slot's segments, no threshold), then,
// after the CTA's other split piece has sampled too, kVisitRest (the shared
// gate, the sample entries at or above it copied to the segments' heads, the
// rest of the walk, the publication, and the merge when it is the block's last
// piece). Whole blocks are kVisitWhole in region 2, as the unshared kernel.
// Every piece's samples are published at the start of its CTA's work, so a
// rest visit waits only for visits that never wait: no deadlock with the grid
// resident (one CTA per SM, grid <= SMs).
__device__ __forceinline__ int* fused_v3_ctr(const Sm90FusedParams& p, int c, int slot) {
  return reinterpret_cast<int*>(p.ws) + c * kShareCtrWords + slot * 4;
}
__device__ __forceinline__ uint32_t* fused_v3_rec(const Sm90FusedParams& p, int c, int slot) {
  return p.ws + size_t(gridDim.x) * kShareCtrWords + size_t(c * 3 + slot) * 256;
}

// The split protocol's fences. A piece publishes by: every thread stores,
// the row group's barrier, then one thread fences (fence.acq_rel.gpu) and
// counts (the barrier orders the others' stores before its fence, as
// cooperative groups' grid sync does); a reader polls the count, fences, then
// loads. (A fence.sc.gpu by every writer, __threadfence, is not needed and
// showed as membar stalls.)
template <class Cfg>
__device__ __forceinline__ void fused_v3_fence() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}
// A warp waits until counter word `w` of the split block (c0, slot0) reaches
// n, then fences (its reads after it see what the count publishes). Every
// warp waits for itself, on a warp-uniform condition: a loop the compiler
// cannot prove uniform in these calls makes the tile loops' values
// non-uniform after it, and costs them their registers.
template <class Cfg>
__device__ __forceinline__ void fused_v3_wait_ctr(const Sm90FusedParams& p, int c0, int slot0, int w, int n) {
  const volatile int* ctr = fused_v3_ctr(p, c0, slot0) + w;
  while (__shfl_sync(0xffffffffu, *ctr, 0) < n) __nanosleep(64);
  fused_v3_fence<Cfg>();
}

// Row r's published bins (which: 0 the sample's, 1 the final candidates') of
// the piece in region (c, slot), after the candidate regions.
template <class Cfg>
__device__ __forceinline__ uint32_t* fused_v3_hist(const Sm90FusedParams& p, int c, int slot, int which, int r) {
  const size_t set_words = size_t(8) * Cfg::kSegs * 2 * size_t(p.cap);
  return p.ws + size_t(gridDim.x) * (kShareCtaWords + kShareRegions * set_words) +
         (size_t(c * kShareRegions + slot) * 2 + static_cast<size_t>(which)) * kShareHistWords + size_t(r) * 256;
}

// The largest of the pieces' published largest sample-tile maxima of row r
// (the union sample's largest key; 0: none). One warp, the same in every warp.
__device__ __forceinline__ uint32_t fused_v3_union_smax(const Sm90FusedParams& p, int c0, int slot0, int np, int r,
                                                        int lane) {
  uint32_t m = 0;
  np = __shfl_sync(0xffffffffu, np, 0);  // (said warp-uniform: see fused_v3_union_gate_call)
  for (int i0 = 0; i0 < np; i0 += 32) {
    const int i = i0 + lane;
    if (i < np) m = max(m, __ldcg(fused_v3_rec(p, c0 + i, i == 0 ? slot0 : 0) + r * 32 + kRecTileMax));
  }
  return __reduce_max_sync(0xffffffffu, m);
}

// Row r's segments over the pieces of the split block (c0, slot0, np pieces):
// the sample tails (sample) or the scan heads with their final counts.
template <class Cfg>
__device__ __forceinline__ fused_detail::PieceSegs fused_v3_piece_segs(const Sm90FusedParams& p, int c0, int slot0,
                                                                      int np, int r, int half, bool sample) {
  static_assert(fused_detail::kPieceSlots == kShareRegions && Cfg::kSegs == 8, "PieceSegs' layout is kShares'");
  const uint32_t cap = static_cast<uint32_t>(p.cap);
  fused_detail::PieceSegs s;
  s.base = p.ws + size_t(gridDim.x) * kShareCtaWords + size_t(r * Cfg::kSegs) * 2u * cap +
           (sample ? cap - static_cast<uint32_t>(Cfg::kTail) : 0u);
  s.cnt = fused_v3_rec(p, 0, 0) + r * 32 + (sample ? kRecSample : kRecFinal);
  s.cap = cap;
  s.c0 = c0;
  s.slot0 = slot0;
  s.np = np;
  s.half = half;
  return s;
}

// The C-th largest (with multiplicity) of the pieces' published sample tile
// maxima of row r (4 per piece, 0 padded): the C-th largest over every sampled
// tile of the block (each piece's 4 largest hold the union's 4 largest); 0
// when fewer than C are nonzero. One warp.
__device__ __forceinline__ uint32_t fused_v3_union_tile_cap(const Sm90FusedParams& p, int c0, int slot0, int np, int r,
                                                            uint32_t c, int lane) {
  auto at = [&](int i) {
    return __ldcg(fused_v3_rec(p, c0 + (i >> 2), (i >> 2) == 0 ? slot0 : 0) + r * 32 + kRecTileMax + (i & 3));
  };
  uint64_t bound = 1ull << 32;
  uint32_t acc = 0;
#pragma unroll 1
  for (uint32_t j = 0; j < c; ++j) {
    uint32_t mx = 0;
    for (int i0 = 0; i0 < 4 * np; i0 += 32) {  // (warp-uniform loops: see fused_v3_union_gate_call)
      const int i = i0 + lane;
      const uint32_t x = i < 4 * np ? at(i) : 0u;
      if (x < bound) mx = max(mx, x);
    }
    mx = __reduce_max_sync(0xffffffffu, mx);
    if (mx == 0) return 0;
    uint32_t eq = 0;
    for (int i0 = 0; i0 < 4 * np; i0 += 32) {
      const int i = i0 + lane;
      eq += i < 4 * np && at(i) == mx ? 1u : 0u;
    }
    acc += __reduce_add_sync(0xffffffffu, eq);
    if (acc >= c) return mx;
    bound = mx;
  }
  return 0;
}

// fused_v3_union_tile_cap on maxima already in registers (t: lane i's piece
// i's 4 largest, 0 for lanes past the pieces; at most 32 pieces).
__device__ __forceinline__ uint32_t fused_v3_tile_cap_regs(const uint32_t (&t)[4], uint32_t c) {
  uint64_t bound = 1ull << 32;
  uint32_t acc = 0;
#pragma unroll 1
  for (uint32_t j = 0; j < c; ++j) {
    uint32_t mx = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q)
      if (t[q] < bound) mx = max(mx, t[q]);
    mx = __reduce_max_sync(0xffffffffu, mx);
    if (mx == 0) return 0;
    uint32_t eq = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) eq += t[q] == mx ? 1u : 0u;
    acc += __reduce_add_sync(0xffffffffu, eq);
    if (acc >= c) return mx;
    bound = mx;
  }
  return 0;
}

// kVisitSample's end (all math warps; cnt: the lane's count in its segment's
// tail): publishes the row group's sample counts, each row's 4 largest sample
// tile maxima and its sample tiles, clears the maxima, counts the row group's
// publication on the block's counter.
template <class Cfg>
__device__ __forceinline__ bool fused_v3_union_gate_call(const Sm90FusedParams* pp, int reg, int b, int c0, int slot0,
                                                         int np);
template <class Cfg>
__device__ __noinline__ void fused_v3_split_sample_end(const Sm90FusedParams* pp, int reg, int c0, int slot0, int ns,
                                                       uint32_t cnt, int /*b*/, int /*np*/) {
  const Sm90FusedParams& p = *pp;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  FusedV3Ctl* ctl = reinterpret_cast<FusedV3Ctl*>(smem + Cfg::kOffCtl);
  const int tid = threadIdx.x, lane = tid & 31;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int rg = wg >> 1, kg = wg & 1, warp_in_wg = (tid >> 5) & 3;
  uint32_t* rec = fused_v3_rec(p, blockIdx.x, reg);
  if (lane < 4) __stcg(rec + (4 * rg + lane) * 32 + kRecSample + kg * 4 + warp_in_wg, cnt);
  ptx::named_barrier_sync(5 + rg, 256);  // the row group's tile maxima are complete
  {  // the row's sample bins below the piece's largest sample key, published
    const int r = 4 * rg + warp_in_wg;
    uint32_t* hist = reinterpret_cast<uint32_t*>(smem + Cfg::kOffHist) + r * 256;
    fused_detail::PairCtx pc{reinterpret_cast<uint32_t*>(smem + Cfg::kOffPairX) + r * 16, 8 + r, kg, 0};
    const uint32_t smax = __reduce_max_sync(0xffffffffu, ctl->tile_max[r][lane]);
    const fused_detail::PieceSegs ps = fused_v3_piece_segs<Cfg>(p, blockIdx.x, reg, 1, r, kg, true);
    fused_detail::pair_for_each(ps, lane, [&](uint32_t key, bool valid) {
      const uint32_t d = smax - key;
      if (valid && key >= 1u && key <= smax && d < (256u << 16)) atomicAdd(hist + (d >> 16), 1u);
    });
    __syncwarp();
    fused_detail::pair_sync(pc.bar);  // both warps' counts are in (and both have read the tile maxima)
    uint4* hv = reinterpret_cast<uint4*>(hist + kg * 128 + lane * 4);
    __stcg(reinterpret_cast<uint4*>(fused_v3_hist<Cfg>(p, blockIdx.x, reg, 0, r) + kg * 128 + lane * 4), *hv);
    *hv = make_uint4(0u, 0u, 0u, 0u);
  }
  if (kg == 0) {
    const int r = 4 * rg + warp_in_wg;
    uint32_t v = ctl->tile_max[r][lane];
#pragma unroll 1
    for (int j = 0; j < 4; ++j) {
      const uint32_t mx = __reduce_max_sync(0xffffffffu, v);
      const uint32_t at = __ballot_sync(0xffffffffu, v == mx && mx != 0);
      if (at && lane == __ffs(static_cast<int>(at)) - 1) v = 0;
      if (lane == 0) __stcg(rec + r * 32 + kRecTileMax + j, mx);
    }
    if (lane == 0) __stcg(rec + r * 32 + kRecTiles, static_cast<uint32_t>(ns));
    ctl->tile_max[r][lane] = 0;
  }
  ptx::named_barrier_sync(5 + rg, 256);
  if (slot0 < 2 && (tid & 255) == 0) {  // (a whole block, slot 2, has no other piece to tell)
    fused_v3_fence<Cfg>();
    atomicAdd(fused_v3_ctr(p, c0, slot0) + rg, 1);
  }
}

// The shared gate of row r from the pieces' published sample bins (both warps
// of the row's pair; hist zero on entry and on exit): piece i's bin j (keys in
// (smax_i - (j + 1) 2^16, smax_i - j 2^16]) counts in bin j + ceil((M -
// smax_i) / 2^16) below the union's largest key M, the lower of the two it may
// fall in, so every entry counted in bins 0 .. J is at or above M - (J + 1)
// 2^16 + 1. Returns the lowest key of the bin that holds the rho-th (at least
// rho entries at or above it; never above the exact rho-th), or 0 when fewer
// than rho entries fall in the 256 bins.
// kRegs (np <= 32): t0, lane i's piece i's largest sample tile maximum,
// already loaded (fused_v3_union_gate_call): no record loads here, and 8
// pieces' bins in flight instead of 4.
template <class Cfg, bool kRegs = false>
__device__ __forceinline__ uint32_t fused_v3_union_gate_fast(const Sm90FusedParams& p, int c0, int slot0, int np, int r,
                                                             int kg, uint32_t rho, fused_detail::PairCtx& pc,
                                                             uint32_t* hist, int lane, uint32_t t0 = 0) {
  const uint32_t M = kRegs ? __reduce_max_sync(0xffffffffu, t0) : fused_v3_union_smax(p, c0, slot0, np, r, lane);
  const uint32_t j_lane = static_cast<uint32_t>(kg * 128 + lane * 4);
  np = __shfl_sync(0xffffffffu, np, 0);  // (said warp-uniform)
  constexpr int B = kRegs ? 8 : 4;
#pragma unroll 1
  for (int i0 = 0; i0 < np; i0 += B) {  // (B pieces' loads in flight)
    uint32_t sm[B];
    uint4 h[B];
#pragma unroll
    for (int u = 0; u < B; ++u) {
      const int i = i0 + u;
      const int c = c0 + (i < np ? i : 0), sl = i == 0 ? slot0 : 0;
      if constexpr (kRegs) {
        const uint32_t x = __shfl_sync(0xffffffffu, t0, i & 31);
        sm[u] = i < np ? x : 0u;
      } else {
        sm[u] = i < np ? __ldcg(fused_v3_rec(p, c, sl) + r * 32 + kRecTileMax) : 0u;
      }
      h[u] = i < np ? __ldcg(reinterpret_cast<const uint4*>(fused_v3_hist<Cfg>(p, c, sl, 0, r) + j_lane))
                    : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < B; ++u) {
      const uint32_t e = M - sm[u];  // (sm <= M; a piece without a sample has no counts)
      const uint32_t j = j_lane + (e >> 16) + ((e & 0xffffu) != 0u ? 1u : 0u);
      if (h[u].x && j < 256u) atomicAdd(hist + j, h[u].x);
      if (h[u].y && j + 1u < 256u) atomicAdd(hist + j + 1u, h[u].y);
      if (h[u].z && j + 2u < 256u) atomicAdd(hist + j + 2u, h[u].z);
      if (h[u].w && j + 3u < 256u) atomicAdd(hist + j + 3u, h[u].w);
    }
  }
  __syncwarp();
  fused_detail::pair_sync(pc.bar);  // both warps' counts are in
  uint32_t tot = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) tot += hist[j * 32 + lane];
  tot = __reduce_add_sync(0xffffffffu, tot);
  uint32_t before = 0, in_bin = 0, bin = 0;
  if (tot >= rho) bin = fused_detail::warp_find_digit_t<false>(hist, rho, false, &before, &in_bin, lane);
  fused_detail::pair_sync(pc.bar);  // both warps have read the histogram
#pragma unroll
  for (int j = 0; j < 4; ++j) hist[kg * 128 + lane * 4 + j] = 0;
  fused_detail::pair_sync(pc.bar);  // cleared before either warp counts into it again
  if (M == 0u || tot < rho) return 0u;
  const uint32_t below = (bin + 1u) << 16;
  return M >= below ? M - below + 1u : 1u;
}

// kVisitRest's gate (all math warps): waits for every piece's sample, then
// row 4 rg + warp_in_wg's pair ranks the shared gate over them
// (fused_v3_gate_rho's rule on the union; the cap is the C-th largest of all
// the pieces' sample tile maxima, C = min(4, sample tiles)); the first warp
// sets thr_s and gkey. Returns whether the row is gated (the first warp's).
template <class Cfg>
__device__ __forceinline__ bool fused_v3_union_gate_call(const Sm90FusedParams* pp, int reg, int b, int c0, int slot0,
                                                         int np) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  const FusedV3PairRow<Cfg> rw(p, reg, 0, b);
  const int r = rw.r, lane = rw.lane, kg = rw.kg, rg = r >> 2;
  // (Every warp waits for itself, on a warp-uniform condition: a loop the
  // compiler cannot prove uniform in this call makes the tile loops' values
  // non-uniform after it, and costs them their registers.)
  const long long tw0 = clock64();
  if (np > 1) fused_v3_wait_ctr<Cfg>(p, c0, slot0, rg, np);
  if (p.probe == 2 && lane == 0)  // (probe 2: the wait for the samples, word 2)
    atomicAdd(rw.stats + 2, static_cast<unsigned long long>(clock64() - tw0));
  unsigned long long* thr_s = reinterpret_cast<unsigned long long*>(rw.smem + Cfg::kOffThr);
  FusedV3Shr* shr = reinterpret_cast<FusedV3Shr*>(rw.smem + Cfg::kOffShr);
  uint32_t m = 0, tiles = 0;
  uint32_t tmx[4] = {0u, 0u, 0u, 0u};  // (np <= 32) lane i's piece i's 4 largest tile maxima
  for (int i0 = 0; i0 < np; i0 += 32) {
    const int i = i0 + lane;
    if (i < np) {
      const uint32_t* rec = fused_v3_rec(p, c0 + i, i == 0 ? slot0 : 0) + r * 32;
#pragma unroll
      for (int sg = 0; sg < 8; ++sg) m += __ldcg(rec + kRecSample + sg);
      tiles += __ldcg(rec + kRecTiles);
      if (np <= 32) {
#pragma unroll
        for (int q = 0; q < 4; ++q) tmx[q] = __ldcg(rec + kRecTileMax + q);
      }
    }
  }
  m = __reduce_add_sync(0xffffffffu, m);
  tiles = __reduce_add_sync(0xffffffffu, tiles);
  int start_unused;
  const uint32_t n = rw.row < p.rows ? static_cast<uint32_t>(row_length(p, rw.row, &start_unused)) : 0u;
  const uint32_t rho = np > 0 ? fused_v3_gate_rho_mn<Cfg>(p, m, n, r, 0xffu) : 0u;  // (np 0: a redo, no gate)
  uint32_t gk = 0;
  if (rho) {
    PairCtx pc = rw.ctx();
    uint64_t th = 0;
    uint32_t c_unused = 0;
    const uint32_t fast = np <= 32 ? fused_v3_union_gate_fast<Cfg, true>(p, c0, slot0, np, r, kg, rho, pc, rw.hist,
                                                                          lane, tmx[0])
                                   : fused_v3_union_gate_fast<Cfg>(p, c0, slot0, np, r, kg, rho, pc, rw.hist, lane);
    th = static_cast<uint64_t>(fast) << 32;
    if (fast == 0) {
      const PieceSegs ps = fused_v3_piece_segs<Cfg>(p, c0, slot0, np, r, kg, true);
      // (heavy ties at the rank: the tied key's gate, kTieGate; a one-warp
      // select over the pieces here would cost the tile loops their registers)
      auto none = [](int, int, uint32_t) {};
      pair_row_core<false, decltype(none)&, PairNoMark, false, 4, PieceSegs, true>(
          ps, pc, 0, rho, 0u, false, 0, rw.hist, rw.sk, rw.si, lane, &c_unused, &th, none);
    }
    if (kg == 0) {
      const uint32_t c = tiles < static_cast<uint32_t>(kMinGateTiles) ? tiles : static_cast<uint32_t>(kMinGateTiles);
      const uint32_t tc = np <= 32 ? fused_v3_tile_cap_regs(tmx, c) : fused_v3_union_tile_cap(p, c0, slot0, np, r, c, lane);
      gk = min(static_cast<uint32_t>(th >> 32), tc);
    }
  }
  if (kg == 0 && lane == 0) {
    shr->gkey[r] = gk;
    thr_s[r] = gk ? gate_threshold(gk) : 0ull;
    if (gk && p.probe == 2) atomicAdd(rw.stats + 9, 1ull);
  }
  return gk != 0;
}

// kVisitRest after the gate (all math warps; the row group's thr_s is set):
// each warp copies its sample entries at or above its rows' gates from its
// segments' tails to their heads (the tails stay as published: other pieces
// may still be ranking them). Returns the lane's row's count in its segment.
template <class Cfg>
__device__ __forceinline__ uint32_t fused_v3_split_copy(const Sm90FusedParams* pp, int reg, int np) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  const unsigned long long* thr_s = reinterpret_cast<const unsigned long long*>(smem + Cfg::kOffThr);
  const int tid = threadIdx.x, lane = tid & 31, quad = lane & 3;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int rg = wg >> 1, kg = wg & 1, seg = kg * 4 + ((tid >> 5) & 3);
  const uint32_t cap = static_cast<uint32_t>(p.cap), seg_stride = 2u * cap;
  uint32_t* ws_set = p.ws + fused_v3_set_off<Cfg>(p, reg);
  const uint32_t* rec = fused_v3_rec(p, blockIdx.x, reg);
  uint32_t mine = 0;
#pragma unroll 1
  for (int i = 0; i < (np > 0 ? 4 : 0); ++i) {  // (np 0: a redo, nothing sampled)
    const int r = 4 * rg + i;
    const uint64_t th = thr_s[r];
    // (warp-uniform bounds, said so: a loop the compiler cannot prove uniform
    // here makes every value after the call non-uniform in the tile loops)
    const int c = __shfl_sync(0xffffffffu, static_cast<int>(__ldcg(rec + r * 32 + kRecSample + seg)), 0);
    uint32_t* head = ws_set + size_t(r * Cfg::kSegs + seg) * seg_stride;
    const uint32_t* tail = head + (cap - static_cast<uint32_t>(Cfg::kTail));
    // (in order, one entry per lane and step, positions by ballot)
    const uint32_t gk = static_cast<uint32_t>(th >> 32);
    uint32_t kept = 0;
    // (every load of the row's tail in flight at once: kTail / 32 per lane;
    // th = gk << 32, so composite >= th is key >= gk)
    constexpr int G = Cfg::kTail / 32;
    static_assert(Cfg::kTail % 32 == 0, "whole lane groups");
    uint32_t kk[G], ii[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int j = g * 32 + lane;
      kk[g] = j < c ? __ldcg(tail + j) : 0u;
      ii[g] = j < c ? __ldcg(tail + cap + j) : 0u;
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int j = g * 32 + lane;
      const bool keep = j < c && kk[g] >= gk;
      const uint32_t m = __ballot_sync(0xffffffffu, keep);
      if (keep) {
        const uint32_t at = kept + __popc(m & ((1u << lane) - 1u));
        __stcg(head + at, kk[g]);
        __stcg(head + cap + at, ii[g]);
      }
      kept += __popc(m);
    }
    if (quad == i) mine = kept;
  }
  __syncwarp();
  return mine;
}

// kVisitRest's start (all math warps, Q buffer qb of block b): the shared
// gate (fused_v3_union_gate_call), then this warp's sample entries at or above
// it copied to its segments' heads (fused_v3_split_copy). Returns the lane's
// count; the rows' thresholds are in thr_s.
template <class Cfg>
__device__ __noinline__ uint32_t fused_v3_split_rest_start(const Sm90FusedParams* pp, int qb, int b, int /*qi*/) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  const int rg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 256, 0);
  const volatile int* vis = reinterpret_cast<const FusedV3Shr*>(smem + Cfg::kOffShr)->vis[rg][qb];
  const int reg = __shfl_sync(0xffffffffu, vis[3], 0), c0 = __shfl_sync(0xffffffffu, vis[4], 0);
  const int slot0 = __shfl_sync(0xffffffffu, vis[5], 0), np = __shfl_sync(0xffffffffu, vis[6], 0);
  const long long tg0 = clock64();
  fused_v3_union_gate_call<Cfg>(pp, reg, b, c0, slot0, np);
  ptx::named_barrier_sync(5 + rg, 256);  // the row group's gates are in thr_s
  if (pp->probe == 2 && (threadIdx.x & 31) == 0)  // (probe 2: the gate with its wait, word 1)
    atomicAdd(reinterpret_cast<unsigned long long*>(pp->counter) + 1 + 1, static_cast<unsigned long long>(clock64() - tg0));
  const uint32_t c = fused_v3_split_copy<Cfg>(pp, reg, np);
  return c;
}

// kShares, at the end of visit qi (all math warps; after its tile loops: a
// call before them costs the tile loops their registers): waits for visit
// qi + 1's description, writes its vis fields, and when it is a rest visit
// runs its start (fused_v3_split_rest_start), leaving each warp's row counts
// in rest_cnt. Returns nothing; the next visit reads them back.
template <class Cfg>
__device__ __noinline__ void fused_v3_prestart(const Sm90FusedParams* pp, int qi) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  constexpr int SI = Cfg::kSlotInts;
  const int tid = threadIdx.x, lane = tid & 31;
  const int rg = __shfl_sync(0xffffffffu, tid / 256, 0);
  const int qb = qi & 1;
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBars) + 2 * Cfg::kNumStages;
  ptx::mbar_wait(q_full + qb, (qi >> 1) & 1);
  const volatile int* slot = reinterpret_cast<const volatile int*>(smem + Cfg::kOffSlot) + SI * qb;
  FusedV3Shr* shr = reinterpret_cast<FusedV3Shr*>(smem + Cfg::kOffShr);
  const int b = __shfl_sync(0xffffffffu, slot[0], 0);
  if (b < 0 || __shfl_sync(0xffffffffu, slot[6], 0) != kVisitRest) return;
  if (lane < 9) shr->vis[rg][qb][lane] = slot[lane < 7 ? 6 + lane : lane == 7 ? 2 : 5];
  __syncwarp();
  const uint32_t c = fused_v3_split_rest_start<Cfg>(pp, qb, b, qi);
  if (lane < 4) shr->rest_cnt[tid >> 5][lane] = c;  // (lane l holds row 4 rg + l, as every lane of quad l)
  __syncwarp();
}

// At a rest visit's end (all math warps, after the final
// counts are published): row 4 rg + warp_in_wg's pair counts this piece's
// candidates of the row in the fast bins of [gate, M], M the union sample's
// largest key, and publishes them (fused_v3_hist, which 1). Returns M, or 0
// where the row has no such bins (not gated, or M not above the gate). The
// same answer in every piece of the block (the same published records).
// Not inlined: its registers stay out of the tile loops'.
template <class Cfg>
__device__ __noinline__ uint32_t fused_v3_publish_final_bins(const Sm90FusedParams* pp, int reg, int c0, int slot0,
                                                             int np) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  const FusedV3PairRow<Cfg> rw(p, reg, 0, 0);
  const int r = rw.r, lane = rw.lane, kg = rw.kg;
  const uint32_t gk = reinterpret_cast<const FusedV3Shr*>(rw.smem + Cfg::kOffShr)->gkey[r];
  const uint32_t M = gk ? fused_v3_union_smax(p, c0, slot0, np, r, lane) : 0u;
  if (gk < 1u || M <= gk) return 0u;
  PairCtx pc = rw.ctx();
  pair_count_gate_bins(fused_v3_piece_segs<Cfg>(p, blockIdx.x, reg, 1, r, kg, false), pc, gk, M, rw.hist, lane);
  uint4* hv = reinterpret_cast<uint4*>(rw.hist + kg * 128 + lane * 4);
  __stcg(reinterpret_cast<uint4*>(fused_v3_hist<Cfg>(p, blockIdx.x, reg, 1, r) + kg * 128 + lane * 4), *hv);
  *hv = make_uint4(0u, 0u, 0u, 0u);
  return M;
}

// The np pieces' published final bins j_lane .. j_lane + 3 of row r summed
// (kB pieces' loads in flight). np warp-uniform.
template <class Cfg, int kB>
__device__ __forceinline__ uint4 fused_v3_sum_bins(const Sm90FusedParams& p, int c0, int slot0, int np, int r,
                                                   uint32_t j_lane) {
  uint4 a = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll 1
  for (int i0 = 0; i0 < np; i0 += kB) {
    uint4 h[kB];
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      const int i = i0 + u;
      h[u] = i < np ? __ldcg(reinterpret_cast<const uint4*>(fused_v3_hist<Cfg>(p, c0 + i, i == 0 ? slot0 : 0, 1, r) +
                                                             j_lane))
                    : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < kB; ++u) {
      a.x += h[u].x;
      a.y += h[u].y;
      a.z += h[u].z;
      a.w += h[u].w;
    }
  }
  return a;
}

// The block's last piece: row 4 rg + warp_in_wg's bins
// summed over the np pieces' published ones into the row's histogram (each
// warp of the pair its half), for pair_finish_row_prebinned. Not inlined, as
// above.
template <class Cfg>
__device__ __noinline__ void fused_v3_sum_final_bins(const Sm90FusedParams* pp, int c0, int slot0, int np) {
  const Sm90FusedParams& p = *pp;
  const FusedV3PairRow<Cfg> rw(p, 0, 0, 0);
  const int r = rw.r, lane = rw.lane, kg = rw.kg;
  const uint32_t j_lane = static_cast<uint32_t>(kg * 128 + lane * 4);
  np = __shfl_sync(0xffffffffu, np, 0);  // (said warp-uniform)
  // (16 pieces' loads in flight; 4 until 2026-12-04: four round trips at 16 pieces)
  const uint4 a = fused_v3_sum_bins<Cfg, 16>(p, c0, slot0, np, r, j_lane);
  *reinterpret_cast<uint4*>(rw.hist + j_lane) = a;
}

// kVisitRest's end (all math warps; cnt: the lane's count): publishes the row
// group's final counts, counts the piece on the block's counter, and when it
// is the block's last piece, row 4 rg + warp_in_wg's pair selects the row
// over every piece's heads with the shared gate (exact: every key at or above
// it is in some piece; a gated row with fewer than min(k, n) such entries is
// unsafe and the caller queues the whole block's rescan). Returns whether the
// row is safe (the first warp's answer).
template <class Cfg>
__device__ __noinline__ bool fused_v3_split_end_call(const Sm90FusedParams* pp, int reg, int b, int c0, int slot0,
                                                     int np, uint32_t cnt, uint32_t active) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  const FusedV3PairRow<Cfg> rw(p, reg, 0, b);
  const int r = rw.r, lane = rw.lane, kg = rw.kg, rg = r >> 2, row = rw.row;
  const int tid = threadIdx.x;
  FusedV3Shr* shr = reinterpret_cast<FusedV3Shr*>(rw.smem + Cfg::kOffShr);
  volatile int* last = shr->last;
  uint32_t* rec = fused_v3_rec(p, blockIdx.x, reg);
  if (lane < 4) __stcg(rec + (4 * rg + lane) * 32 + kRecFinal + kg * 4 + ((tid >> 5) & 3), cnt);
  ptx::named_barrier_sync(5 + rg, 256);
  // Every piece counts its own candidates of a gated row in the fast bins of
  // [gate, the union's largest sample key] and publishes them before it counts
  // itself done; hsmax, that key (0: no bins, the general select). The same in
  // every piece (the same published records).
  uint32_t hsmax = 0;
  if (np > 1) {
    hsmax = fused_v3_publish_final_bins<Cfg>(pp, reg, c0, slot0, np);
    // Every pair's bins are stored before the row group's thread 0 counts the
    // piece done below: without this barrier the block's last piece could sum
    // bins another piece had not yet stored, its pass would then disagree with
    // them and the row would go to one warp's select (the same set, in
    // another order).
    ptx::named_barrier_sync(5 + rg, 256);
  }
  if (np > 1) {  // (one piece, or a redo: this CTA has every candidate)
    if ((tid & 255) == 0) {
      fused_v3_fence<Cfg>();
      const int done = atomicAdd(fused_v3_ctr(p, c0, slot0) + 2 + rg, 1);
      last[rg] = done == np - 1;
      fused_v3_fence<Cfg>();
    }
    ptx::named_barrier_sync(5 + rg, 256);
    if (!last[rg]) return true;
  }
  if (row >= p.rows || !((active >> r) & 1u)) return true;
  const uint32_t gk = np > 0 ? shr->gkey[r] : 0u;
  np = np > 0 ? np : 1;
  const uint64_t thr = gk ? gate_threshold(gk) : 0ull;
  int start;
  const int n = row_length(p, row, &start);
  const uint32_t k = static_cast<uint32_t>(p.topk);
  const uint32_t need = min(k, static_cast<uint32_t>(n));
  int* orow = p.out + size_t(row) * k;
  uint32_t cands = 0;
  PairCtx pc = rw.ctx();
  const PieceSegs ps = fused_v3_piece_segs<Cfg>(p, c0, slot0, np, r, kg, false);
  auto out = [&](int at, int v, uint32_t) { orow[at] = v; };
  // The pieces' bins summed, then one pass (hsmax 0: the general select).
  if (hsmax != 0u) fused_v3_sum_final_bins<Cfg>(pp, c0, slot0, np);
  const int res = pair_finish_row_prebinned(ps, pc, thr, hsmax, k, need, gk != 0, start, rw.hist, rw.sk, rw.si, lane,
                                            &cands, out);
  bool ok = res > 0;
  if (res < 0 && kg == 0)  // heavy ties at the k-th key: one warp
    ok = warp_finish_row<true>(fused_v3_piece_segs<Cfg>(p, c0, slot0, np, r, -1, false), thr, k, need, gk != 0, start,
                               rw.hist, rw.sk, rw.si, lane, &cands, [&](int at, int v, uint32_t) { orow[at] = v; });
  if (kg == 0 && p.probe == 2 && lane == 0) {
    atomicAdd(rw.stats + 4, static_cast<unsigned long long>(cands));
    atomicAdd(rw.stats + 13, 1ull);
    if (!ok) atomicAdd(rw.stats + 8, 1ull);
    if (res < 0) atomicAdd(rw.stats + 10, 1ull);
  }
  return ok;
}

// kShares: the end of visit qi of block b (all math warps; cnt: the lane's
// count): a sample's publication, or a rest visit's publication, merge (the
// block's last piece) and report; then the next visit's start
// (fused_v3_prestart).
template <class Cfg>
__device__ __noinline__ void fused_v3_visit_end(const Sm90FusedParams* pp, int qi, int b, uint32_t cnt) {
  const Sm90FusedParams& p = *pp;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  const int tid = threadIdx.x, lane = tid & 31;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  const int rg = wg >> 1, kg = wg & 1, sel_row = 4 * rg + ((tid >> 5) & 3);
  const int qb = qi & 1;
  const volatile int* vis = reinterpret_cast<const FusedV3Shr*>(smem + Cfg::kOffShr)->vis[rg][qb];
  auto vis_u = [&](int i) { return __shfl_sync(0xffffffffu, vis[i], 0); };
  uint64_t* q_empty = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBars) + 2 * Cfg::kNumStages + 2;
  unsigned long long* thr_s = reinterpret_cast<unsigned long long*>(smem + Cfg::kOffThr);
  uint32_t* redo_rg = reinterpret_cast<uint32_t*>(smem + Cfg::kOffRedo);
  FusedV3Ctl* ctl = reinterpret_cast<FusedV3Ctl*>(smem + Cfg::kOffCtl);
  unsigned long long* stats = reinterpret_cast<unsigned long long*>(p.counter) + 1;
  const long long t0 = clock64();
  if (vis_u(0) == kVisitSample) {  // publish the piece's sample; its rest visit comes later
    if (vis_u(2) != vis_u(7)) {  // its last MMA was not the piece's last tile: release the Q buffer now
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(q_empty + qb);
    }
    fused_v3_split_sample_end<Cfg>(pp, vis_u(3), vis_u(4), vis_u(5), vis_u(2), cnt, b, vis_u(6));
  } else {  // a rest visit: publish; the block's last piece selects its rows
    const int reg = vis_u(3);
    const bool ok = fused_v3_split_end_call<Cfg>(pp, reg, b, vis_u(4), vis_u(5), vis_u(6), cnt,
                                                 static_cast<uint32_t>(vis_u(8)));
    if (p.probe == 2 && lane == 0 && kg == 0) atomicAdd(stats + 5, static_cast<unsigned long long>(clock64() - t0));
    if (kg == 0) {
      if (lane == 0) {
        thr_s[sel_row] = 0;
        if (!ok) atomicOr(&redo_rg[rg], 1u << sel_row);
      }
      ptx::named_barrier_sync(1 + wg, 128);
      if ((tid & 127) == 0) {  // the row group's half of the block (a whole-block rescan if any row is unsafe)
        volatile uint32_t* rr = redo_rg + rg;
        const uint32_t mask = *rr;
        *rr = 0;
        fused_v3_half_finished(ctl, b, mask);
      }
    }
    ptx::named_barrier_sync(5 + rg, 256);
  }
  const long long t1 = clock64();
  fused_v3_prestart<Cfg>(pp, qi + 1);
  if (p.probe == 2 && lane == 0) atomicAdd(stats + 7, static_cast<unsigned long long>(clock64() - t1));
}

// kHybrid: how many blocks (the first ones) the shares cover, of nblocks on
// grid CTAs. Rule 0 (session 12): every block when they are at most two
// waves, none when they fill whole waves, else the last partial wave and one
// full wave (so a split block has about two pieces, not grid / (nblocks mod
// grid) small ones). Rule n > 0 (session 26, Sm90FusedParams::share_rule;
// shares of at least n tiles): every block when they are at most one wave,
// else only the partial last wave's blocks, so every CTA runs whole blocks
// on the whole-block path and the partial wave's few blocks are cut into
// small pieces over the CTAs (at 1064 rows on 132 SMs: 132 whole blocks and
// one block in 512 / n pieces, where rule 0 splits all 133 in two).
__host__ __device__ constexpr int fused_v3_share_blocks(int nblocks, int grid, int rule = 0) {
  return rule > 0 ? (nblocks <= grid ? nblocks : nblocks % grid)
                  : nblocks <= 2 * grid ? nblocks : nblocks % grid == 0 ? 0 : grid + nblocks % grid;
}

// The split kernel's grid (issue 12, session 17): with B row blocks of at
// most a quarter of the SMs, every block gets the same whole number of pieces
// (B * floor(sms / B) CTAs) when that keeps at least 90% of the SMs busy. A CTA
// holding the ends of two blocks serialises their gates and merges: 64 rows x
// 64K keys ran 0.269 ms on 132 CTAs, 0.181 on 128; 128 rows 0.285 / 0.196;
// 192-520 rows within 2% either way (BENCHMARKS.md, session 17, round 10).
__host__ __device__ constexpr int fused_v3_split_grid(int rows, int sms) {
  const int b = (rows + 7) / 8;
  return b <= 0 || 4 * b > sms ? sms : 10 * (b * (sms / b)) >= 9 * sms ? b * (sms / b) : sms;
}

// A lane's weight pair at byte offset kOff from shared address a, as a
// volatile shared load with an immediate offset (the loads stay where they are
// issued, from addresses held for the block).
template <int kOff>
__device__ __forceinline__ float2 fused_v3_lds_f2(uint32_t a) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2+%3];" : "=f"(v.x), "=f"(v.y) : "r"(a), "n"(kOff));
  return v;
}
template <class Cfg>
__device__ __forceinline__ void fused_v3_body(const CUtensorMap& tm_q, const CUtensorMap& tm_k,
                                              const CUtensorMap& tm_scales, const CUtensorMap& tm_weights,
                                              const Sm90FusedParams& p) {
  using L = typename Cfg::Logits;
  using namespace fused_detail;
  constexpr int S = Cfg::kNumStages;
  constexpr int R = 8;
  constexpr int NS = Cfg::kSegs;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBars);
  uint64_t* full = bars;
  uint64_t* empty = bars + S;
  uint64_t* q_full = bars + 2 * S;
  uint64_t* q_empty = bars + 2 * S + 2;
  uint32_t* hist_all = reinterpret_cast<uint32_t*>(smem + Cfg::kOffHist);
  uint32_t* segcnt_all = reinterpret_cast<uint32_t*>(smem + Cfg::kOffSegCnt);
  unsigned long long* thr_all = reinterpret_cast<unsigned long long*>(smem + Cfg::kOffThr);
  volatile int* slot = reinterpret_cast<volatile int*>(smem + Cfg::kOffSlot);  // [2][kSlotInts]
  constexpr int SI = Cfg::kSlotInts;
  uint32_t* redo_rg = reinterpret_cast<uint32_t*>(smem + Cfg::kOffRedo);       // [rg]: rows found unsafe
  FusedV3Ctl* ctl = reinterpret_cast<FusedV3Ctl*>(smem + Cfg::kOffCtl);
  volatile FusedV3Ctl* ctl_v = ctl;

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int lane = tid & 31;
  if (tid == 0) init_pipeline_barriers<S, Cfg::kMathThreads / 32>(full, empty, q_full, q_empty);
  for (int i = tid; i < 8 * 256; i += Cfg::kThreads) hist_all[i] = 0;
  for (int i = tid; i < 8; i += Cfg::kThreads) thr_all[i] = 0;
  if (tid < 4) redo_rg[tid] = 0;
  if (tid < 8) reinterpret_cast<uint32_t*>(smem + Cfg::kOffSmax)[tid] = 0;
  for (int i = tid; i < static_cast<int>(sizeof(FusedV3Ctl) / 4); i += Cfg::kThreads)
    reinterpret_cast<uint32_t*>(ctl)[i] = 0;
  __syncthreads();

  const int nblocks = (p.rows + R - 1) / R;
  const int k = p.topk;
  const size_t set_words = size_t(8) * NS * 2 * size_t(p.cap);
  unsigned long long* stats = reinterpret_cast<unsigned long long*>(p.counter) + 1;
  if constexpr (Cfg::kShares) {  // this CTA's share of the call's tiles (every thread; synchronises the CTA)
    const Sm90LogitsParams lp{p.starts, p.ends, nullptr, 0, p.rows, p.keys};
    fused_split_share<Cfg::kThreads>(lp, reinterpret_cast<FusedV3Shr*>(smem + Cfg::kOffShr),
                                     fused_v3_share_blocks(nblocks, gridDim.x, p.share_rule), gridDim.x,
                                     p.share_rule > 0 && nblocks > static_cast<int>(gridDim.x) ? p.share_rule
                                                                                                : kShareMinTiles);
  }

  if (wg == Cfg::kMathWarpgroups) {
    // ---------------- producer warpgroup ----------------
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (tid != Cfg::kMathThreads) {
      // The producer warpgroup's other threads check the row ranges (range_check.cuh) and leave.
      constexpr int kCheckLo = Cfg::kMathThreads + 32;
      constexpr int kCheckers = Cfg::kThreads - kCheckLo;
      check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelFused,
                       range_checker_index(tid, kCheckLo, kCheckers), gridDim.x * kCheckers);
      return;
    }
    ptx::prefetch_tensor_map(&tm_q);
    ptx::prefetch_tensor_map(&tm_k);
    ptx::prefetch_tensor_map(&tm_scales);
    ptx::prefetch_tensor_map(&tm_weights);
    const Sm90LogitsParams lp{p.starts, p.ends, nullptr, 0, p.rows, p.keys};
    // The Q tile of block b into Q buffer qb, in the permuted layout: smem row
    // 32 s + 8 jj + 2 q + e of row group g holds its Q row (s ^ q, head 8 jj +
    // 2 q + e): 64 boxes of two rows per row group (the 128B swizzle is a
    // function of the shared address, so each box lands where a whole-tile
    // load would put those bytes).
    auto load_q = [&](int b, int qb) {
      uint8_t* qdst = smem + Cfg::kOffQ + qb * Cfg::kQTileBytes;
#pragma unroll 1
      for (int n = 0; n < 256; n += 2) {
        const int sl = (n >> 5) & 3, q = (n >> 1) & 3;
        const int src = (n & 128) + 32 * (sl ^ q) + (n & 31);  // (n & 31) = 8 jj + 2 q
        ptx::tma_load_2d(qdst + n * 128, &tm_q, q_full + qb, 0, b * R * 32 + src);
      }
    };
    if constexpr (Cfg::kShares) {
      // ---- split blocks: the visits of this CTA's share (see "Split blocks") ----
      const FusedV3Shr* shr = reinterpret_cast<const FusedV3Shr*>(smem + Cfg::kOffShr);
      int it = 0, qi = 0, issued = 0, head = 0;
      // The block whose Q and weights each buffer holds (-1: none). A visit of
      // the block a buffer still holds (a split piece's rest visit after its
      // sample visit two visits earlier) skips the 128 two-row box loads: only
      // the TMA writes these buffers.
      int qheld[2] = {-1, -1};
      // The walk positions [tb, te) of the piece [t0, t0 + np) of block b's tiles.
      auto visit = [&](int b, int t0, int np, int ns, uint32_t active, int kind, int tb, int te, int reg, int c0,
                       int slot0, int npieces) {
        const int qb = qi & 1;
        ptx::mbar_wait(q_empty + qb, ((qi >> 1) & 1) ^ 1);
        ++qi;
        int lo, hi;
        block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi);
        const int plo = lo + t0 * Cfg::kBlockKeys;
        const int stride = tile_stride(np);
        volatile int* sl = slot + SI * qb;
        sl[0] = b;
        sl[1] = plo;
        sl[2] = np;
        sl[3] = stride;
        sl[4] = ns;
        sl[5] = static_cast<int>(active);
        sl[6] = kind;
        sl[7] = tb;
        sl[8] = te;
        sl[9] = reg;
        sl[10] = c0;
        sl[11] = slot0;
        sl[12] = npieces;
        if (te <= tb) {  // no tile: the consumers only run the visit's bookkeeping
          ptx::mbar_arrive(q_full + qb);
          return;
        }
        if (qheld[qb] == b) {
          ptx::mbar_arrive(q_full + qb);  // (the buffer still holds block b's Q and weights)
        } else {
          ptx::mbar_arrive_expect_tx(q_full + qb, Cfg::kQTileBytes + Cfg::kWeightBytes);
          uint8_t* qdst = smem + Cfg::kOffQ + qb * Cfg::kQTileBytes;
#pragma unroll 1
          for (int n = 0; n < 256; n += 2) {
            const int sl2 = (n >> 5) & 3, q = (n >> 1) & 3;
            ptx::tma_load_2d(qdst + n * 128, &tm_q, q_full + qb, 0, b * R * 32 + (n & 128) + 32 * (sl2 ^ q) + (n & 31));
          }
          qheld[qb] = b;
          ptx::tma_load_2d(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes, &tm_weights, q_full + qb, 0, b * R);
        }
        for (int t = 0, tp = np - 1; t < te; ++t, tp = next_tile(tp, np, stride)) {
          if (t < tb) continue;
          const int stage = it % S;
          ptx::mbar_wait(empty + stage, ((it / S) & 1) ^ 1);
          const int key0 = plo + tp * Cfg::kBlockKeys;
          ptx::mbar_arrive_expect_tx(full + stage, Cfg::kKTileBytes + Cfg::kScaleBytes);
          ptx::tma_load_2d(smem + Cfg::kOffK + stage * Cfg::kKTileBytes, &tm_k, full + stage, 0, key0);
          ptx::tma_load_2d(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, &tm_scales, full + stage, key0, 0);
          ++it;
        }
      };
      // A whole block (or a redo of its rows `active`: no gate) in region 2,
      // as the whole-block kernel runs it.
      auto whole = [&](int b, int n, uint32_t active, bool redo) {
        visit(b, 0, n, redo ? 0 : fused_sample_tiles(n, k, p.target), active, kVisitWhole, 0, n, 2, 0, 0, 1);
        ++issued;
      };
      const long long total = shr->sh_total, g0 = shr->sh_g0, count = shr->sh_count;
      const int gp = shr->sh_gp;
      if (shr->sh_b0 >= 0 && count > 0) {
        // Split pieces: the block's first CTA c0 (owner of its first tile G),
        // the slot it keeps the block in (0: the block opens c0's share), its
        // pieces; sample tiles in proportion to the piece (at least one, at
        // most kSplitSampleTiles).
        auto c0_of = [&](long long G) { return split_owner(G, total, gp); };
        auto slot0_of = [&](long long G) { return total * c0_of(G) / gp == G ? 0 : 1; };
        auto pieces_of = [&](long long G, int ntb) { return split_owner(G + ntb - 1, total, gp) - c0_of(G) + 1; };
        auto ns_of = [&](int ntb, int np) {
          const int nsb = fused_sample_tiles(ntb, k, p.target);
          int v = (nsb * np + ntb - 1) / ntb;
          v = v < 1 ? 1 : v;
          v = v > Cfg::kSplitSampleTiles ? Cfg::kSplitSampleTiles : v;
          return v < np ? v : np;
        };
        int lo, hi;
        const int bf = shr->sh_b0, tf = shr->sh_t0;
        const int ntf = block_span<R, Cfg::kBlockKeys>(lp, bf, lo, hi);
        const int npf = static_cast<int>(min(static_cast<long long>(ntf - tf), count));
        const bool split_f = tf > 0 || tf + npf < ntf;
        int bl = -1, npl = 0, ntl = 0;  // the share's last block, if not bf
        long long left = count - npf;
        for (int b = bf + 1; left > 0 && b < nblocks; ++b) {
          const int n = block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi);
          if (n == 0) continue;
          if (left <= n) {
            bl = b;
            npl = static_cast<int>(left);
            ntl = n;
            break;
          }
          left -= n;
        }
        const bool split_l = bl >= 0 && npl < ntl;
        const long long gf = g0 - tf, gl = g0 + count - npl;
        const int nsf = split_f ? ns_of(ntf, npf) : 0, nsl = split_l ? ns_of(ntl, npl) : 0;
        if (split_f) visit(bf, tf, npf, nsf, 0xffu, kVisitSample, 0, nsf, 0, c0_of(gf), slot0_of(gf), pieces_of(gf, ntf));
        if (split_l) visit(bl, 0, npl, nsl, 0xffu, kVisitSample, 0, nsl, 1, c0_of(gl), slot0_of(gl), pieces_of(gl, ntl));
        if (split_f) {
          visit(bf, tf, npf, nsf, 0xffu, kVisitRest, nsf, npf, 0, c0_of(gf), slot0_of(gf), pieces_of(gf, ntf));
          ++issued;
        } else {
          whole(bf, ntf, 0xffu, false);
        }
        for (int b = bf + 1; b < bl; ++b) {
          const int n = block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi);
          if (n > 0) whole(b, n, 0xffu, false);
        }
        if (split_l) {
          visit(bl, 0, npl, nsl, 0xffu, kVisitRest, nsl, npl, 1, c0_of(gl), slot0_of(gl), pieces_of(gl, ntl));
          ++issued;
        } else if (bl >= 0) {
          whole(bl, ntl, 0xffu, false);
        }
      }
      // The blocks past the shares, whole, from the block counter (largest
      // first; a block is claimed only once its Q buffer is free).
      const int nshare = fused_v3_share_blocks(nblocks, gridDim.x, p.share_rule);
      for (;;) {
        ptx::mbar_wait(q_empty + (qi & 1), ((qi >> 1) & 1) ^ 1);
        const int w = atomicAdd(p.counter, 1);
        if (w >= nblocks - nshare) break;
        const int b = nblocks - 1 - w;
        int lo, hi;
        const int n = block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi);
        visit(b, 0, n, fused_sample_tiles(n, k, p.target), 0xffu, kVisitWhole, 0, n, 2, 0, 0, 1);
        ++issued;
      }
      // Blocks with no tile (every row empty) among the shares' blocks: block b by CTA b mod grid.
      for (int b = blockIdx.x; b < nshare; b += gridDim.x) {
        int lo, hi;
        if (block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi) == 0) whole(b, 0, 0xffu, false);
      }
      // Redos (whole blocks, no gate) until every half this CTA issued has
      // reported (a half's redo is queued before it counts itself).
      for (;;) {
        int b = -1;
        uint32_t mask = 0;
        bool got = redo_queue_pop(ctl_v, head, b, mask, [](volatile FusedV3Ctl*, int) {});
        if (!got) {
          if (ctl_v->halves_done < 2 * issued) {
            __nanosleep(256);
            continue;
          }
          got = redo_queue_pop(ctl_v, head, b, mask, [](volatile FusedV3Ctl*, int) {});
          if (!got) break;
        }
        int lo, hi;
        whole(b, block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi), mask, true);
      }
      const int qb = qi & 1;
      ptx::mbar_wait(q_empty + qb, ((qi >> 1) & 1) ^ 1);
      slot[SI * qb] = -1;
      ptx::mbar_arrive(q_full + qb);
      return;
    }
    // ---- whole blocks from the block counter ----
    const int nb = (p.rows + R - 1) / R;
    int it = 0, issued = 0, head = 0;
    for (int qi = 0;; ++qi) {
      const int qb = qi & 1;
      ptx::mbar_wait(q_empty + qb, ((qi >> 1) & 1) ^ 1);
      // Claim the next block only once its Q buffer is free (one block ahead).
      int b = -1;
      uint32_t active = 0xffu;
      // A redo is a rescan with no gate (a gated redo of a block whose rows all
      // failed would fail again, forever).
      bool redo = redo_queue_pop(ctl_v, head, b, active, [](volatile FusedV3Ctl*, int) {});
      bool have = redo;
      if (!have) {
        const int w = atomicAdd(p.counter, 1);
        if (w < nb) {
          b = nb - 1 - w;
          have = true;
        } else {
          // No new block: a block still in flight may yet need a redo (each
          // row group reports its half of a block).
          while (ctl_v->halves_done < 2 * issued) __nanosleep(256);
          redo = have = redo_queue_pop(ctl_v, head, b, active, [](volatile FusedV3Ctl*, int) {});
        }
      }
      if (!have) {
        slot[SI * qb] = -1;
        ptx::mbar_arrive(q_full + qb);
        return;
      }
      ++issued;
      int lo, hi;
      const int nt = block_span<R, Cfg::kBlockKeys>(lp, b, lo, hi);
      const int stride = tile_stride(nt);
      slot[SI * qb + 0] = b;
      slot[SI * qb + 1] = lo;
      slot[SI * qb + 2] = nt;
      slot[SI * qb + 3] = stride;
      slot[SI * qb + 4] = !redo ? fused_sample_tiles(nt, k, p.target) : 0;
      slot[SI * qb + 5] = static_cast<int>(active);
      if (nt == 0) {  // every row empty: the consumers only write -1
        ptx::mbar_arrive(q_full + qb);
        continue;
      }
      ptx::mbar_arrive_expect_tx(q_full + qb, Cfg::kQTileBytes + Cfg::kWeightBytes);
      load_q(b, qb);
      ptx::tma_load_2d(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes, &tm_weights, q_full + qb, 0, b * R);
      for (int t = 0, tp = nt - 1; t < nt; ++t, ++it, tp = next_tile(tp, nt, stride)) {
        const int stage = it % S;
        ptx::mbar_wait(empty + stage, ((it / S) & 1) ^ 1);
        const int key0 = lo + tp * Cfg::kBlockKeys;
        // Development check (probe 4): the stage's first key, for the consumers to compare.
        if (p.probe == 4) reinterpret_cast<volatile int*>(p.counter)[16 + stage] = key0;
        ptx::mbar_arrive_expect_tx(full + stage, Cfg::kKTileBytes + Cfg::kScaleBytes);
        ptx::tma_load_2d(smem + Cfg::kOffK + stage * Cfg::kKTileBytes, &tm_k, full + stage, 0, key0);
        ptx::tma_load_2d(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, &tm_scales, full + stage, key0, 0);
      }
    }
  }

  // ---------------- math warpgroups ----------------
  ptx::setmaxnreg_inc<Cfg::kMathRegs>();
  // The warpgroup index through a shuffle from lane 0: warp-uniform, so the
  // descriptor words derived from it stay in uniform registers.
  const int wg_u = __shfl_sync(0xffffffffu, wg, 0);
  const int rg = wg_u >> 1, kg = wg_u & 1;  // row group, key group
  const int warp_in_wg = (tid >> 5) & 3;
  const int quad = lane & 3;
  const int my_row = 4 * rg + quad;          // the block row this lane holds after the reduce-scatter
  const int seg = kg * 4 + warp_in_wg;       // this warp's segment of each of its rows
  const bool selector = kg == 0;             // warp warp_in_wg of the first warpgroup reports row 4 rg + warp_in_wg
  const int sel_row = 4 * rg + warp_in_wg;
  const int bar_rg = 5 + rg;                 // named barrier of the row group (8 warps)
  const uint32_t a_lo0 = desc_lo_k128_sw128(smem + Cfg::kOffK + kg * 64 * 128);
  const uint32_t b_lo0 = desc_lo_k128_sw128(smem + Cfg::kOffQ + rg * L::kN * 128);
  // words from one segment of a row to the next (a constant: one topk per configuration)
  const uint32_t seg_stride = 2u * static_cast<uint32_t>(Cfg::cap(Cfg::kFixedTopk));
  const int key_in_tile = kg * 64 + warp_in_wg * 16 + (lane >> 2);  // this lane's first key of a tile (and + 8)

  const long long t_start = clock64();
  int it = 0;
  int st_i = 0;        // the next tile's stage in the ring, and its phase
  uint32_t st_ph = 0;
  for (int qi = 0;; ++qi) {
    if constexpr (Cfg::kShares) {
      // (warp-uniform by construction; said so, so that the stage and Q buffer
      // indices, hence the MMA descriptors, stay in uniform registers)
      qi = __shfl_sync(0xffffffffu, qi, 0);
      it = __shfl_sync(0xffffffffu, it, 0);
    }
    const int qb = qi & 1;
    const int qs = qb;
    ptx::mbar_wait(q_full + qs, (qi >> 1) & 1);
    const int b = slot[SI * qs];
    if (b < 0) {
      if (p.probe == 2 && lane == 0) atomicAdd(stats + 6, static_cast<unsigned long long>(clock64() - t_start));
      break;
    }
    const int nt = Cfg::kShares ? __shfl_sync(0xffffffffu, slot[SI * qs + 2], 0) : slot[SI * qs + 2];
    const int stride = Cfg::kShares ? __shfl_sync(0xffffffffu, slot[SI * qs + 3], 0) : slot[SI * qs + 3];
    // Split blocks: the visit's kind, its walk positions [t_begin, t_end) of
    // the piece's nt tiles, its candidate region and its split block (c0,
    // slot0, pieces); a rest visit has no sample tiles (its gate is the
    // pieces'). (The fields the tile loops do not need are kept in this warp's
    // vis slot, registers being at their cap in the loops; the producer may
    // rewrite the Q buffer's slot once the visit's last MMA has released it.)
    // (a function, not a pointer held across the tile loops)
    auto vis_of = [&]() -> volatile int* {
      return reinterpret_cast<FusedV3Shr*>(smem + Cfg::kOffShr)->vis[rg][qb];
    };
    // A vis field as a warp-uniform value (a shuffle from lane 0): branches on
    // it stay uniform, so the loop counters (and the MMA descriptors derived
    // from them) stay in uniform registers.
    auto vis_u = [&](int i) { return __shfl_sync(0xffffffffu, vis_of()[i], 0); };
    const int kind0 = Cfg::kShares ? __shfl_sync(0xffffffffu, slot[SI * qs + 6], 0) : kVisitWhole;
    const int t_begin = Cfg::kShares ? __shfl_sync(0xffffffffu, slot[SI * qs + 7], 0) : 0;
    const int reg0 = Cfg::kShares ? slot[SI * qs + 9] : 0;
    if constexpr (Cfg::kShares) {
      // kind, t_begin, t_end, reg, c0, slot0, pieces, the piece's tiles, active rows
      if (lane < 9) vis_of()[lane] = slot[SI * qs + (lane < 7 ? 6 + lane : lane == 7 ? 2 : 5)];
      __syncwarp();
    }
    const int ns = kind0 == kVisitRest ? 0 : Cfg::kShares ? __shfl_sync(0xffffffffu, slot[SI * qs + 4], 0) : slot[SI * qs + 4];
    // A rest visit starts with the pieces' shared gate and this piece's sample
    // entries at or above it: the previous visit's end ran it
    // (fused_v3_prestart; every split visit is preceded by one, the first of a
    // CTA is never a rest visit), before this visit's loop state exists (a call
    // between the loops costs the tile loops their registers).
    uint32_t rest_cnt = 0;
    if constexpr (Cfg::kShares)
      if (kind0 == kVisitRest) rest_cnt = reinterpret_cast<const volatile FusedV3Shr*>(smem + Cfg::kOffShr)->rest_cnt[tid >> 5][quad];
    // (The loops keep the whole block's bounds: a rest visit covers the walk
    // positions [t_begin, nt); a split sample's ns tiles end before nt (its Q
    // buffer is released after the loop unless ns == nt) and its compaction
    // check, if any, finds its tails far under the trigger.)
    const uint32_t active = static_cast<uint32_t>(slot[SI * qs + 5]);
    // Row r's segment s: keys at word (r * NS + s) * seg_stride of the set,
    // indices + cap; this lane's own segment as a 32-bit word offset from p.ws
    // (registers are at their cap in the tile loop).
    const uint32_t set_off = Cfg::kShares ? static_cast<uint32_t>(fused_v3_set_off<Cfg>(p, reg0))
                                          : blockIdx.x * static_cast<uint32_t>(set_words);
    // (a split sample appends to the segment's tail)
    const uint32_t my_off = set_off + static_cast<uint32_t>(my_row * NS + seg) * seg_stride +
                            (Cfg::kShares && kind0 == kVisitSample ? static_cast<uint32_t>(p.cap - Cfg::kTail) : 0u);
    int pub = 0;  // segment-count publications of this block (compaction checks, gate, block end)
    auto segcnt_of = [&](int pb) { return segcnt_all + (pb & 1) * 8 * NS; };  // [row][seg]
    unsigned long long* thr_s = thr_all;    // [row]

    // This lane's row: the keys [rs, rs + len) (relative test: ka - rs < len, unsigned).
    const int row_g = fused_v3_row<Cfg>(b, my_row);
    int rs = 0, re = 0;
    if (row_g < p.rows && ((active >> my_row) & 1u) && p.probe != 1) {
      rs = __ldg(p.starts + row_g);
      re = __ldg(p.ends + row_g);
      clamp_row_range(rs, re, p.keys);
    }
    const uint32_t len = static_cast<uint32_t>(re - rs);
    // ka of tile tp = key_base + tp * 128 (this lane's first key; the second is + 8).
    const int key_base = slot[SI * qs + 1] + kg * 64 + warp_in_wg * 16 + (lane >> 2);
    bool row_gated = false;  // selector warps: row sel_row has a gate in this block
    uint32_t cnt = rest_cnt;  // entries of this lane's row in this warp's segment
    uint64_t thr = Cfg::kShares && kind0 == kVisitRest ? thr_all[my_row] : 0;  // this lane's row threshold: candidates have composite > thr

    // Loop invariants held in registers for the block (each with an opaque
    // move per tile, so that ptxas keeps them instead of rematerializing them):
    // the quad's lane mask and the lanes-below mask; this lane's four weight
    // rows' shared addresses (slot s holds row s ^ quad), read at immediate
    // offsets; and (kHeldDescs) the block's four Q (B operand) descriptors and
    // the four A descriptors' pairs as 64-bit values (each tile writes the A
    // descriptors' low words only).
    uint32_t qmask_k = 0x11111111u << quad, lt_k = ptx::lanemask_lt();
    uint64_t db_k[4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);
      asm("mov.b64 %0, {%1, %2};" : "=l"(db_k[kk]) : "r"(b_lo0 + qb * (Cfg::kQTileBytes >> 4) + 2 * kk), "r"(kDescHi));
    }
    uint64_t da_k[4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);
      asm("mov.b64 %0, {%1, %2};" : "=l"(da_k[kk]) : "r"(a_lo0 + 2 * kk), "r"(kDescHi));
    }
    uint32_t wa_k[4];
#pragma unroll
    for (int s4 = 0; s4 < 4; ++s4)
      wa_k[s4] = ptx::smem_addr(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes) + ((rg * 64 + (s4 ^ quad) * 16 + quad) * 8);
    // The filter and appends of one tile (its "tail"): this lane's order keys
    // k0 / k1 of keys ka / ka + 8 of walk position t. kSample: also the
    // tile's largest key per row (the gate's position cap). The pass flags
    // without short-circuits; the appends as predicated stores at 32-bit word
    // offsets, the index store at an immediate offset from the key store.
    auto tile_tail = [&](auto sample_tag, uint32_t k0, uint32_t k1, int ka, int t) {
      constexpr bool kSample = decltype(sample_tag)::value;
      const int kb = ka + 8;
      const bool in0 = static_cast<uint32_t>(ka - rs) < len, in1 = static_cast<uint32_t>(kb - rs) < len;
      const bool pass0 = in0 & (composite(k0, static_cast<uint32_t>(ka)) > thr);
      const bool pass1 = in1 & (composite(k1, static_cast<uint32_t>(kb)) > thr);
      if constexpr (kSample) {
        uint32_t mx = max(in0 ? k0 : 0u, in1 ? k1 : 0u);
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        if (lane < 4 && mx) atomicMax(&ctl->tile_max[4 * rg + lane][t], mx);
      }
      asm volatile("mov.b32 %0, %0;\n\tmov.b32 %1, %1;" : "+r"(qmask_k), "+r"(lt_k));
      const uint32_t qmask = qmask_k;
      const uint32_t m0 = __ballot_sync(0xffffffffu, pass0) & qmask;
      const uint32_t m1 = __ballot_sync(0xffffffffu, pass1) & qmask;
      const uint32_t lt = lt_k;
      const uint32_t n0 = __popc(m0);
      const uint32_t o = my_off + cnt;  // this lane's next slot: a word offset from p.ws
      constexpr int kCapW = Cfg::cap(Cfg::kFixedTopk);
      const uint32_t at0 = o + __popc(m0 & lt), at1 = o + n0 + __popc(m1 & lt);
      ptx::st_cg_pair_if_off<kCapW>(pass0, p.ws + at0, k0, static_cast<uint32_t>(ka));
      ptx::st_cg_pair_if_off<kCapW>(pass1, p.ws + at1, k1, static_cast<uint32_t>(kb));
      cnt += n0 + __popc(m1);
    };
    // The tile whose tail is pending (its order keys and first key; its walk
    // position is the current tile's minus one): each tile's tail runs after
    // the next tile's MMAs are issued, while they run. (kAlwaysTail: the
    // pending tail runs unconditionally, no flag: with nothing pending its
    // first key is rs - 16, so both keys are out of the row's range.)
    uint32_t pend_k0 = 0, pend_k1 = 0;
    int pend_ka = Cfg::kAlwaysTail ? rs - 16 : 0;
    bool pend_ok = false;
    bool rel_next = false;  // kLazyCheck: the next stage release orders the published counts
    // kLazyCheck: the count slot of check j for row `row`, segment `sg`.
    auto ckc_at = [&](int j, int row, int sg) -> uint32_t& {
      return reinterpret_cast<uint32_t*>(smem + Cfg::kOffCkc)[((j & 1) * 8 + row) * NS + sg];
    };
    auto flush = [&](auto sample_tag, int t_next) {
      if (Cfg::kAlwaysTail || pend_ok) tile_tail(sample_tag, pend_k0, pend_k1, pend_ka, t_next - 1);
      pend_ok = false;
      if constexpr (Cfg::kAlwaysTail) pend_ka = rs - 16;
    };

    // One key tile: MMA, epilogue, filter, appends to this warp's segments.
    // kSample: also the tile's largest key per row (the gate's position cap).
    auto tile = [&](auto sample_tag, int t, int tp) {
      const int stage = st_i;
      ptx::mbar_wait(full + stage, st_ph);
      if (++st_i == S) {  // (the next tile's)
        st_i = 0;
        st_ph ^= 1u;
      }
      float acc[L::kAcc];
      // The scales before the MMAs, the release after their use (tile_scales).
      float scale0, scale1;
      tile_scales(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, key_in_tile, scale0, scale1);
      float2 w[4][4];
      if constexpr (Cfg::kHeldDescs) {
        asm volatile("mov.b64 %0, %0;\n\tmov.b64 %1, %1;\n\tmov.b64 %2, %2;\n\tmov.b64 %3, %3;"
                     : "+l"(db_k[0]), "+l"(db_k[1]), "+l"(db_k[2]), "+l"(db_k[3]));
        desc_pairs_set_lo(da_k, a_lo0 + stage * (Cfg::kKTileBytes >> 4));  // the A descriptors: new low words
        logits_mma_issue_dab(acc, da_k, db_k);
        asm volatile("mov.b64 %0, %0;\n\tmov.b64 %1, %1;\n\tmov.b64 %2, %2;\n\tmov.b64 %3, %3;"
                     : "+l"(da_k[0]), "+l"(da_k[1]), "+l"(da_k[2]), "+l"(da_k[3]));
      } else {
        logits_tile_mma_issue_lo<L>(acc, a_lo0 + stage * (Cfg::kKTileBytes >> 4), b_lo0 + qb * (Cfg::kQTileBytes >> 4));
      }
      if (Cfg::kAlwaysTail || pend_ok) tile_tail(sample_tag, pend_k0, pend_k1, pend_ka, t - 1);  // while the MMAs run
      ptx::wgmma_wait<0>();
      ptx::fence_regs(acc);
      float fin[2][1];
      // The block's weights from the TMA-loaded buffer at the held row addresses.
      asm volatile("mov.b32 %0, %0;\n\tmov.b32 %1, %1;\n\tmov.b32 %2, %2;\n\tmov.b32 %3, %3;"
                   : "+r"(wa_k[0]), "+r"(wa_k[1]), "+r"(wa_k[2]), "+r"(wa_k[3]));
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        w[r][0] = fused_v3_lds_f2<0>(wa_k[r]);
        w[r][1] = fused_v3_lds_f2<32>(wa_k[r]);
        w[r][2] = fused_v3_lds_f2<64>(wa_k[r]);
        w[r][3] = fused_v3_lds_f2<96>(wa_k[r]);
      }
      logits_reduce_perm(acc, w, fin);
      if (t + 1 == nt) {  // the block's last MMA has read Q
        __syncwarp();
        if (lane == 0) ptx::mbar_arrive(q_empty + qs);
      }
      const int ka = key_base + tp * Cfg::kBlockKeys;
      const uint32_t k0 = order_key(fin[0][0] * scale0), k1 = order_key(fin[1][0] * scale1);
      // The stage's release after the scales' use (their loads are complete):
      // a release arrival, which also carries whatever a lazy check published.
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(empty + stage);
      pend_k0 = k0;
      pend_k1 = k1;
      pend_ka = ka;
      pend_ok = true;
      ++it;
    };

    auto check = [&]() {
      const uint4 r = fused_v3_check_call<Cfg>(&p, Cfg::kShares ? qb : 0, pub & 1, cnt, static_cast<uint32_t>(thr),
                                               static_cast<uint32_t>(thr >> 32));
      ++pub;
      cnt = r.x;
      thr = (static_cast<uint64_t>(r.z) << 32) | r.y;
    };
    int t = 0, tp = nt - 1;
    if constexpr (Cfg::kShares)
      for (; t < t_begin; ++t) tp = next_tile(tp, nt, stride);
    // Tiles left until the next check ((t + 1) % kCheckTiles == 0 as a
    // countdown; split visits count from their first walk position t_begin).
    int chk_left = Cfg::kCheckTiles - (Cfg::kShares ? t_begin % Cfg::kCheckTiles : 0);
    auto check_due = [&](int tt) {
      if (--chk_left != 0) return false;
      chk_left = Cfg::kCheckTiles;
      return tt + 1 < nt;
    };
#pragma unroll 1
    for (; t < ns; ++t, tp = next_tile(tp, nt, stride)) {
      tile(std::true_type{}, t, tp);
      if (check_due(t)) {
        flush(std::true_type{}, t + 1);
        check();
      }
    }
    flush(std::true_type{}, t);
    if (ns > 0 && (!Cfg::kShares || vis_u(0) == kVisitWhole)) {  // (a whole block's gate)
      // ---- the gate of each row from its sample (every in-range key of the first ns tiles) ----
      const long long t_gate = clock64();
      uint32_t* segcnt = segcnt_of(pub++);
      if (lane < 4) segcnt[(4 * rg + lane) * NS + seg] = cnt;
      ptx::named_barrier_sync(bar_rg, 256);
      {
        const bool gd = fused_v3_gate_pair_call<Cfg>(&p, Cfg::kShares ? 2 : 0, (pub - 1) & 1, b, active, ns);
        if (selector) row_gated = gd;
      }
      ptx::named_barrier_sync(bar_rg, 256);
      // Drop this warp's sample entries below the gate (its 4 rows' segments, in
      // place), unless the sample is small: entries below the gate are not
      // eligible at the block end or in a compaction (eligibility is key >= the
      // threshold's), so they may stay where the sample plus a generous share of
      // the expected candidates per segment stays under the compaction trigger.
      thr = thr_s[my_row];
      uint32_t* ws_set = ws_cta_base(p, set_off);
      const int gate_target = p.target > 0 ? p.target : fused_gate_target(k);
      const bool drop = 16 * ns + (5 * gate_target) / 32 > p.cap - (Cfg::kLazyCheck ? 32 : 16) * Cfg::kCheckTiles;
#pragma unroll 1
      for (int i = 0; i < (drop ? 4 : 0); ++i) {
        const int r = 4 * rg + i;
        const uint64_t th = thr_s[r];
        const uint32_t c = __shfl_sync(0xffffffffu, cnt, i);  // lane i holds row 4 rg + i
        if (th != 0 && c != 0) {
          uint32_t* kp = ws_set + size_t(r * NS + seg) * seg_stride;
          uint32_t* ip = kp + p.cap;
          const Segs sg{{kp, nullptr}, {ip, nullptr}, {static_cast<int>(c), 0}, 1};
          const int left = warp_emit(sg, th, lane, [&](int at, uint32_t key, uint32_t idx) {
            __stcg(kp + at, key);
            __stcg(ip + at, idx);
          });
          if (quad == i) cnt = static_cast<uint32_t>(left);
        }
      }
      if constexpr (Cfg::kLazyCheck) {
        // The counts after the drop, for the first check after the gate
        // (check j1, the first with j1 kCheckTiles - 1 >= ns), ordered by a
        // barrier (that check may come fewer than 8 tiles after the gate).
        const int j1 = (ns + Cfg::kCheckTiles) / Cfg::kCheckTiles;
        if (lane < 4) ckc_at(j1 - 1, 4 * rg + lane, seg) = cnt;
        ptx::named_barrier_sync(bar_rg, 256);
      }
      if (p.probe == 2 && lane == 0) atomicAdd(stats + 7, static_cast<unsigned long long>(clock64() - t_gate));
    }
    if (Cfg::kShares && vis_u(0) == kVisitSample) t = nt;  // (its rest is another visit)
#pragma unroll 1
    for (; t < nt; ++t, tp = next_tile(tp, nt, stride)) {
      tile(std::false_type{}, t, tp);
      if (check_due(t)) {
        flush(std::false_type{}, t + 1);
        if constexpr (Cfg::kLazyCheck) {
          const int j = (t + 1) / Cfg::kCheckTiles;
          if (lane < 4) ckc_at(j, 4 * rg + lane, seg) = cnt;
          const uint32_t c = ckc_at(j - 1, 4 * rg + (lane & 3), lane >> 2);
          const uint32_t lazy_trigger = static_cast<uint32_t>(p.cap - 32 * Cfg::kCheckTiles);
          if (__any_sync(0xffffffffu, c > lazy_trigger)) {  // the same answer in all 8 warps of the row group
            check();
            if (lane < 4) ckc_at(j, 4 * rg + lane, seg) = cnt;  // (after a compaction)
          }
          rel_next = true;
        } else {
          check();
        }
      }
    }
    flush(std::false_type{}, t);

    // ---- block end: both warps of each row select it over the row's 8 segments ----
    if (Cfg::kShares ? vis_u(1) == vis_u(2) : nt == 0) {  // no tile released the (unloaded) Q buffer
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(q_empty + qs);
    }
    if constexpr (Cfg::kShares) {
      // (one call for the whole visit end: every call site of the rest starts
      // in this loop costs the tile loops their registers)
      if (vis_u(0) != kVisitWhole) {
        fused_v3_visit_end<Cfg>(&p, qi, b, cnt);
        continue;
      }
    }
    uint32_t* segcnt = segcnt_of(pub);
    if (lane < 4) segcnt[(4 * rg + lane) * NS + seg] = cnt;
    ptx::named_barrier_sync(bar_rg, 256);  // every append and count of the row group visible
    {
      // Both warps of row sel_row (key groups 0 and 1) select it; the first
      // (the selector) holds the gate flag and reports the row.
      const long long t_sel = clock64();
      const int r = sel_row, row = fused_v3_row<Cfg>(b, r);
      bool ok = true;
      if (p.probe == 3) {
        if (selector && row < p.rows) {
          // Development dump (scripts/fused_v3_debug.py): the row's 8 segment
          // counts, its threshold and the CTA's set offset instead of the select.
          int* orow = p.out + size_t(row) * k;
          if (lane < NS) orow[lane] = static_cast<int>(segcnt[r * NS + lane]);
          if (lane == 8) orow[8] = static_cast<int>(thr_s[r] >> 32);
          if (lane == 9) orow[9] = static_cast<int>(static_cast<uint32_t>(thr_s[r]));
          if (lane == 10) orow[10] = static_cast<int>(set_off);
          if (lane == 11) orow[11] = ns;
          if (lane == 12) orow[12] = pub;
        }
      } else if (((active >> r) & 1u) && row < p.rows) {
        ok = fused_v3_pair_end_call<Cfg>(&p, Cfg::kShares ? 2 : 0, pub & 1, b, row_gated);
      }
      if (selector) {
        if (lane == 0) {
          thr_s[r] = 0;
          reinterpret_cast<uint32_t*>(smem + Cfg::kOffSmax)[r] = 0;
          if (!ok) atomicOr(&redo_rg[rg], 1u << r);
        }
        ptx::named_barrier_sync(1 + wg_u, 128);  // the row group's 4 rows are reported
        if ((tid & 127) == 0) {
          // Each row group reports its half of the block (its rows to redo, if
          // any); the producer ends once every half it issued has reported.
          volatile uint32_t* rr = redo_rg + rg;
          const uint32_t mask = *rr;
          *rr = 0;
          fused_v3_half_finished(ctl, b, mask);
        }
        if (p.probe == 2 && lane == 0) atomicAdd(stats + 5, static_cast<unsigned long long>(clock64() - t_sel));
      }
    }
    // One candidate set: the next block reuses these segments only after the selects.
    ptx::named_barrier_sync(bar_rg, 256);
    if constexpr (Cfg::kShares) fused_v3_prestart<Cfg>(&p, qi + 1);  // (a whole block's end: the next visit's start)
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_fused_mqa_topk_v3_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                                  const __grid_constant__ CUtensorMap tm_scales,
                                  const __grid_constant__ CUtensorMap tm_weights, const __grid_constant__ Sm90FusedParams p) {
  fused_v3_body<Cfg>(tm_q, tm_k, tm_scales, tm_weights, p);
}
// The shipped configurations: whole blocks (one CTA per 8-row block from the
// block counter) and split blocks (equal tile shares over every CTA; the
// blocks of the partial last wave split into pieces), one per topk.
template <int kTopk>
using Sm90FusedV3Whole = Sm90FusedBlocksConfig<kTopk, false>;
template <int kTopk>
using Sm90FusedV3SplitLarge = Sm90FusedBlocksConfig<kTopk, true>;

// Launches the v3 kernel: arguments and contract of launch_sm90_fused_mqa_topk
// (workspace of fused_v3_workspace_bytes<Cfg>(topk, num_sms) bytes).
template <class Cfg>
inline cudaError_t launch_sm90_fused_mqa_topk_v3(const void* q, const void* k, const float* scales,
                                                 const float* weights, const int* starts, const int* ends, int* out,
                                                 void* workspace, int rows, int keys, int topk, int num_sms,
                                                 cudaStream_t stream, int* map_error = nullptr, int probe = 0,
                                                 RangeErrorSink range_err = {}, int target = 0, int share_rule = 0) {
  if (rows <= 0) return cudaSuccess;
  if (topk != Cfg::kFixedTopk) return cudaErrorInvalidValue;  // (one topk per configuration)
  CUtensorMap tm_q, tm_k, tm_s, tm_w;
  const uint64_t q_rows = static_cast<uint64_t>(rows) * 32;
  const int kk = keys > 0 ? keys : 1;  // keys == 0: maps stay valid, every row is empty
  const int res[4] = {
      make_tensor_map_2d(&tm_q, q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 128, q_rows, 128, 128, Cfg::kQBoxRows,
                         CU_TENSOR_MAP_SWIZZLE_128B),
      make_tensor_map_2d(&tm_k, keys > 0 ? k : q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 128, kk, 128, 128, Cfg::kBlockKeys,
                         CU_TENSOR_MAP_SWIZZLE_128B),
      make_tensor_map_2d(&tm_s, keys > 0 ? static_cast<const void*>(scales) : weights, CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                         kk, 1, (uint64_t(kk) * 4 + 15) / 16 * 16, Cfg::kBlockKeys, 1, CU_TENSOR_MAP_SWIZZLE_NONE),
      make_tensor_map_2d(&tm_w, weights, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 32, rows, 32 * 4, 32, Cfg::kRowsPerBlock,
                         CU_TENSOR_MAP_SWIZZLE_NONE)};
  if (const int e = first_map_error(res, 4)) {
    if (map_error) *map_error = e;
    return cudaErrorInvalidValue;
  }
  auto kernel = &sm90_fused_mqa_topk_v3_kernel<Cfg>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  int* counter = static_cast<int*>(workspace);
  // (kShares: and the split blocks' counters after the header)
  err = cudaMemsetAsync(counter, 0, kFusedHeaderBytes + (Cfg::kShares ? size_t(num_sms) * kShareCtrWords * 4 : 0), stream);
  if (err != cudaSuccess) return err;
  uint32_t* ws = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(workspace) + kFusedHeaderBytes);
  const int gate_target = target > 0 ? target : fused_detail::fused_gate_target(topk);  // a development target, or the default
  Sm90FusedParams p{starts, ends, out, ws, counter, rows, keys, topk, Cfg::cap(topk), probe, range_err, gate_target};
  p.share_rule = share_rule;
  kernel<<<num_sms, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(tm_q, tm_k, tm_s, tm_w, p);
  return cudaGetLastError();
}

}  // namespace mqa_topk
