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

// kSmemWeights: the epilogue reads the block's weights from shared memory
// (8 x 16-byte loads per tile, each lane's 32 weights laid out contiguously at
// the block start) instead of holding them in 32 registers: with the
// selection's state the registers of the dense kernel's tile loop would spill.
// Block-level control words in shared memory: the sample tiles' maxima (the
// gate's position cap) and the redo queue (the producer pops entries in order).
struct FusedV3Ctl {
  uint32_t tile_max[8][32];
  int rq_b[16];
  uint32_t rq_mask[16];
  int rq_valid[16];
  int rq_reserve;
  int halves_done;  // block halves (row groups) finished: rows written or queued for a redo
  int share_ready;  // kShares: fused_v3_align_piece has written the CTA's share (FusedV3Shr)
};

// kSplitRG: the second row group's redo queue and finished count (the first's
// are FusedV3Ctl's; the same field names, so the queue functions take either).
struct FusedV3Rq {
  int rq_b[16];
  uint32_t rq_mask[16];
  int rq_valid[16];
  int rq_reserve;
  int halves_done;
};
static_assert(sizeof(FusedV3Rq) <= 256, "kOffRq1's room");

// The call's row of block b's row r (r < 8: the CTA's row slot 4 rg + i; with
// kSplitRG a block is row group rg's 4 rows, b * 4 + i).
template <class Cfg>
__device__ __forceinline__ int fused_v3_row(int b, int r) {
  return Cfg::kSplitRG ? b * 4 + (r & 3) : b * 8 + r;
}

// Queues a redo of block b's rows `mask` (one thread; none when 0), then counts
// `halves` of the block's halves (row groups) as finished.
template <class Ctl>
__device__ __forceinline__ void fused_v3_half_finished(Ctl* ctl, int b, uint32_t mask, int halves = 1) {
  if (mask) redo_queue_push(ctl, b, mask, [](volatile Ctl*, int) {});
  __threadfence_block();
  atomicAdd(&ctl->halves_done, halves);
}

template <int kNumStages_, int kSets_ = 1, int kCheckTiles_ = 8, int kWeightsMode_ = 1,
          bool kInlineCheck_ = false, bool kAsyncSelect_ = false, int kMathRegs_ = 112, bool kPairSelect_ = false,
          bool kPairGate_ = false, bool kLazyDrop_ = false, bool kSelPhases_ = false, bool kGateRange_ = false,
          int kOutGroups_ = 4, int kGateTargetQ_ = 2, int kRankFloorZ_ = 0, bool kFloorCappedOnly_ = false,
          int kShares_ = 0, bool kEarlyWeights_ = false, int kTimingCut_ = 0, bool kLeanFilter_ = false,
          bool kPipeTail_ = false, bool kRelaxedRelease_ = false, bool kLazyCheck_ = false, int kRegWRows_ = 0,
          bool kSplitRG_ = false, int kLeanLoop_ = 0, int kFixedTopk_ = 0, int kQPerm_ = 0, bool kFastGate_ = false,
          int kSplitHist_ = 0>
struct Sm90FusedV3Config {
  // kSplitHist (kShares, issue 12): the split blocks' cross-piece selects from
  // histograms the pieces publish (workspace: two 8 x 256-word areas per
  // region after the candidate regions, fused_v3_hist), instead of passes over
  // every piece's entries in L2 by one warp pair per row. Bit 1: at its end
  // each piece counts its own candidates of each gated row in the fast bins
  // of [gate, the union sample's largest key] (pair_count_gate_bins) and
  // publishes them; the last piece sums the np histograms and runs one
  // gather + output pass (pair_finish_row_prebinned) where the general select
  // ran a range pass, histogram levels and that pass. Bit 2: at its sample's
  // end each piece publishes its rows' sample histograms (kFastGate's 256
  // bins of 2^16 order keys below the piece's largest sample key); the shared
  // gate sums them, each shifted onto the bins below the union's largest
  // key, every entry moved to the lower of the two bins it may fall in (so
  // at least rho entries are at or above the gate: never above the exact
  // rho-th, at most about two bins below it), where the exact union select
  // made its passes; rows whose rho-th is not within the 256 bins keep it.
  // Bit 4 (with 2): the shared gate reads each piece's record once (sample
  // counts, tiles and its 4 largest tile maxima in one round trip; the union
  // maximum and the tile cap then from registers; at most 32 pieces) and
  // keeps 8 pieces' bins in flight, where bit 2 alone reloads the maxima (two
  // round trips per cap step).
  // Bit 32 (with 2, session 20): the shared gate is ranked once per block and
  // row group, by the piece whose sample publication completes the block's
  // count (at its sample visit's end), and published (kRecGate of the first
  // piece's record; the counter then reads np + 1); every piece's rest visit
  // waits for that and reads its rows' gate keys, where each of the np pieces
  // ranked the same gate from every piece's records and bins (np times the
  // loads on the same lines: at 64 rows 16 pieces, 26K cycles per gate).
  // Bit 512 (session 21): aligned pieces (kAlignPieces, fused_v3_align_piece):
  // where there are at most gp / 2 row blocks of about equal length, each is
  // cut into m = gp / B equal pieces on m B CTAs, instead of equal shares of
  // the call's tiles that cut most blocks off their boundaries (at 256 rows
  // on 128 CTAs, 29 CTAs held pieces of two blocks and paid two samples, two
  // gates and two merges: session 20's timeline; the v2 kernel's kSplitAlign
  // gained 10-17% at 256-512 rows, session 4).
  static constexpr int kSplitHist = kSplitHist_;
  static constexpr bool kAlignPieces = (kSplitHist_ & 512) != 0;
  // Bit 1024 (dev, session 21; with 512): the aligned pieces' launch as
  // thread block clusters, block b's m pieces one cluster
  // (fused_v3_cluster_plan): the first step of the split protocol on
  // clusters. The kernel does not use the clusters yet (same code as without
  // the bit): this measures whether such a launch runs, resident in one wave,
  // at the unclustered speed.
  static constexpr bool kClusterLaunch = (kSplitHist_ & 1024) != 0;
  // Bit 2048 (dev, session 21; with 2): the list gate. Where a block has at
  // most kListGatePieces pieces, each piece publishes, per row, every sample
  // key at or above a boundary of its sample histogram (the bins that hold at
  // most J = fused_list_keys(np) keys, np J <= 512; the boundary, its floor,
  // in its record) beside the 256 bins packed to 16 bits; the shared gate is
  // the rho-th largest of the np lists, ranked from registers after one
  // round trip (16 keys a lane), where bit 2's gate sums np shifted
  // histograms (the bins step: 14.6K cycles per row at 16 pieces, session
  // 18). That is the union sample's exact rho-th when it is at or above
  // every piece's floor; below some floor (a piece holds more than J of the
  // union's top: scores correlated with position) the gate takes bit 2's
  // bins, so it is never lower than bit 2's. More pieces: bit 2 alone.
  static constexpr bool kListGate = (kSplitHist_ & 2048) != 0;
  static_assert(!kListGate || ((kSplitHist_ & 2) != 0 && (kSplitHist_ & (32 | 64)) == 0),
                "kSplitHist bit 2048: the list gate beside bit 2's bins (not bits 32 / 64)");
  static_assert(!kClusterLaunch || kAlignPieces, "kSplitHist bit 1024: clusters of the aligned pieces (bit 512)");
  static constexpr bool kGatePub = (kSplitHist_ & 32) != 0;
  static_assert(kSplitHist_ == 0 || kShares_ != 0, "kSplitHist: the split pieces' histograms (kShares)");
  static_assert(!kGatePub || ((kSplitHist_ & 2) != 0 && (kShares_ & 2) == 0),
                "kSplitHist bit 32: the published shared gate (bit 2; split pieces in slots 0 and 1 only)");
  // kFastGate (dev, with kPairGate and kGateRange): the sample gate by one
  // histogram pass below the row's largest sample key (fused_select.cuh,
  // pair_gate_fast: 256 bins of 2^16 order keys) instead of pair_select's
  // exact rho-th (a range pass, range-bin passes and a scratch finish over
  // the sample in the L2 workspace). The gate is then the lowest key of the
  // rho-th's bin, never above the exact one: a few more candidates, never
  // fewer. Rows whose rho-th lies more than 2^24 keys below the sample's
  // largest take pair_select as before.
  static constexpr bool kFastGate = kFastGate_;
  static_assert(!kFastGate_ || (kPairGate_ && kGateRange_), "kFastGate: on the pair gate with the sample's largest key");
  // kQPerm (dev, whole blocks on the lean loop): a select-free reduce-scatter.
  // The tile epilogue's head sum ends with a quad butterfly (xor 2, then xor
  // 1) in which each lane sends one of two partial sums and keeps the other:
  // 12 FSEL per tile choose them by the lane's quad (logits_epilogue_reduce_w).
  // With kQPerm the Q tile's rows sit in shared memory so that the lane of
  // quad q finds, in the accumulators that hold row r in the dense layout
  // ("slot" s = r), the heads of row s ^ q: smem row 32 s + 8 jj + 2 q + e
  // (the MMA's column) holds Q row (s ^ q, head 8 jj + 2 q + e) of the row
  // group (producer: 64 two-row TMA boxes per row group, the tensor map's box
  // 2 rows; the 128B swizzle is a function of the shared address, so each box
  // lands where the whole-box load put those bytes). Each lane still sums the
  // same heads of each row with the same weights in the same order (its
  // weights read for row s ^ q), so its partial sums are bitwise the dense
  // layout's, only in permuted registers; the butterfly then needs no select
  // (slot 0 + partner's slot 2, slot 1 + partner's slot 3; then slot 0 +
  // partner's slot 1) and forms the same sums in the same order, (v_q + v_q^2)
  // + (v_q^1 + v_q^3): the logits stay bitwise equal to the dense kernel's.
  static constexpr int kQPerm = kQPerm_;
  static_assert(kQPerm_ == 0 || (kLeanLoop_ != 0 && !kSplitRG_ && !kEarlyWeights_ && kRegWRows_ == 0 &&
                                 (kWeightsMode_ == 1 || kWeightsMode_ == 2)),
                "kQPerm: whole blocks on the lean loop, weights from shared memory (modes 1, 2)");
  static constexpr int kQBoxRows = kQPerm_ ? 2 : (kSplitRG_ ? 4 : 8) * 32;  // the Q tensor map's box (rows of 128 B)
  // kFixedTopk (dev, with kLeanLoop bit 2): the configuration runs one topk
  // only (the launcher refuses others), so the appends' index store sits at
  // a compile-time offset from the key store (one address, an immediate:
  // ptx::st_cg_pair_if_off) and the segment stride is a constant.
  static constexpr int kFixedTopk = kFixedTopk_;
  // kLeanLoop (needs kLazyCheck, whole blocks): fewer instructions per tile
  // in the tile loops, which issue at ~0.6 per cycle per scheduler like the
  // dense kernel's but run ~25% more of them per tile (ncu, session 13: 350
  // per warp and tile against the dense kernel's 268): the K stage and its
  // phase kept as counters (no signed division by the stage count), the
  // compaction check's interval as a countdown (no modulo), and every stage
  // release one release arrival (the relaxed and the release arrival are the
  // same SYNCS.ARRIVE, so 48's choice between them was a branch for nothing;
  // every arrival now also carries the counts a lazy check published).
  // kLeanLoop_ is a set of bits: 1 the above; 2 also the appends as
  // predicated stores (ptx::st_cg_pair_if) instead of a branch around each
  // key's two stores.
  static constexpr bool kLeanLoop = kLeanLoop_ != 0;
  // 4: also the pending tail run unconditionally (no flag):
  // with nothing pending its first key is rs - 16, so both keys are out of
  // the row's range and it appends nothing.
  static constexpr bool kPredStores = (kLeanLoop_ & 2) != 0;
  static constexpr bool kAlwaysTail = (kLeanLoop_ & 4) != 0;
  static_assert(kLeanLoop_ == 0 || (kLeanLoop_ & 1), "kLeanLoop: bit 1 with the others");
  static_assert(kFixedTopk_ == 0 || (kLeanLoop_ & 2), "kFixedTopk: on the predicated appends");
  // (kShares, session 19: bits 1 and 2 with kRelaxedRelease on the split
  // kernel's loop, without kLazyCheck / kPipeTail: the check countdown starts
  // at each visit's first tile, so a check still comes every kCheckTiles tiles.)
  static_assert(!kLeanLoop_ || (kRelaxedRelease_ && (kShares_ ? !kLazyCheck_ && (kLeanLoop_ & 4) == 0 : kLazyCheck_)),
                "kLeanLoop: on 48's whole-block loop, or bits 1 and 2 on the split kernel's");
  // kSplitRG (dev): the two row groups run independently, each on its own
  // 4-row blocks from the call's block counter, with its own producer warp
  // (producer warps 0 and 1), its own K ring (kNumStages / 2 stages), its own
  // two Q / weight buffers (the row group's half of each 8-row buffer, so the
  // MMA descriptors and weight addresses are the unsplit ones) and its own
  // redo queue. Why: the row groups of an 8-row block reach the gate and the
  // block end together, so the tensor cores idle while all 16 math warps
  // gate or select (~9% of the headline, `v3check stats`); decoupled, one row
  // group's MMAs run while the other gates or selects. The cost: every K tile
  // serves 4 rows instead of 8 (twice the L2 -> shared traffic per FLOP; the
  // dense kernel's 4-row variant 24 ran at the 8-row speed, BENCHMARKS.md
  // 2026-12-02). The logits are the same arithmetic: bitwise equal.
  static constexpr bool kSplitRG = kSplitRG_;
  static constexpr int kRowsPerBlock = kSplitRG_ ? 4 : 8;  // rows of a block (a row group's, or both row groups')
  static constexpr int kRingStages = kSplitRG_ ? kNumStages_ / 2 : kNumStages_;  // stages of one K ring
  static_assert(!kSplitRG_ || (kNumStages_ % 2 == 0 && !kShares_ && !kAsyncSelect_ && kSets_ == 1 && kPairSelect_),
                "kSplitRG: two rings of kNumStages / 2, whole blocks, one candidate set, pair selects");
  // kRegWRows (dev, with kWeightsMode 2): the lane's weights of its row
  // group's first kRegWRows rows (8 registers each) stay in registers for the
  // whole block; the other rows' are read from the TMA buffer every tile as
  // in mode 2 (16 LDS.64 per tile at 0). The same values in the same order:
  // the logits stay bitwise equal.
  static constexpr int kRegWRows = kRegWRows_;
  static_assert(kRegWRows_ == 0 || (kWeightsMode_ == 2 && !kEarlyWeights_ && kRegWRows_ <= 4), "kRegWRows: on kWeightsMode 2");
  // kLazyCheck (needs kPipeTail): the compaction checks after the gate
  // without a barrier unless one may be due. At check j (after tile
  // j kCheckTiles - 1) each warp publishes its 4 rows' counts in slot j & 1
  // of kOffCkc and reads the row group's 32 counts of check j - 1 from slot
  // (j - 1) & 1: those are complete and not yet overwritten, since a warp at
  // check j waited for a K stage that the producer refilled only after every
  // math warp released tile j kCheckTiles - 9 (8 stages < kCheckTiles), past
  // its check j - 1; a release arrival after every check carries the counts
  // (the producer's empty-barrier acquire, its full-barrier release). Every
  // warp of the row group reads the same 32 counts, so all take the same
  // branch: only when one of them is above cap - 32 kCheckTiles do they run
  // the synchronous check (barrier, current counts, trigger cap - 16
  // kCheckTiles, compaction). Below it, no segment can reach its cap before
  // the next check's decision: at most 16 entries per tile, two intervals.
  // The decisions depend on the counts only, so the runs stay deterministic.
  // The sample tiles keep the synchronous checks; the gate's drop keeps the
  // sample entries only when they stay under the lazy trigger.
  static constexpr bool kLazyCheck = kLazyCheck_;
  static_assert(!kLazyCheck_ || (kPipeTail_ && kNumStages_ < kCheckTiles_), "kLazyCheck: on kPipeTail, stages < check interval");
  // kPipeTail (needs kLeanFilter, no kShares / kEarlyWeights): each tile's
  // filter and appends (its "tail": the order keys' range and threshold
  // tests, the ballots, the stores) run after the NEXT tile's MMAs are
  // issued and before they are waited for, so they overlap the tensor cores
  // instead of following the epilogue on the warp's critical path. The
  // pending tile's two order keys and first key (4 registers) cross the MMA;
  // the accumulators are not touched. A compaction check, the gate and the
  // block end first run the pending tail (their counts include every tile).
  // (These variants also leave out the stage probe, p.probe 4.)
  static constexpr bool kPipeTail = kPipeTail_;
  // kRelaxedRelease: the K stage's release is a relaxed mbarrier arrival
  // (no release ordering of the warp's earlier global stores, the appends of
  // the tile before), issued after the tile's scales have been used (their
  // loads are complete: a data dependency), where the default release
  // follows the MMAs' wait. (SASS: the relaxed and the release arrival are
  // the same SYNCS.ARRIVE instruction, no fence either way; what 46 gains
  // over 45 comes from where it is issued: after the reduce, not right
  // behind the overlapped tail's stores.)
  static constexpr bool kRelaxedRelease = kRelaxedRelease_;
  // kEarlyWeights (needs kWeightsMode 2): each tile's weight loads are issued
  // between the MMAs' issue and their wait, as volatile shared loads with
  // immediate offsets (fused_v3_weights_early), so their latency hides behind
  // the MMAs whatever ptxas's schedule of the epilogue. Without it the loads
  // follow the wait, and how early their values are used is up to ptxas: in
  // the kShares builds (33-36) it used them 1-5 instructions after the load
  // (short-scoreboard stalls 0.62 -> 1.49 per instruction, ncu, session 13),
  // the 12% those builds lost on the same blocks as 32.
  static constexpr bool kEarlyWeights = kEarlyWeights_;
  // kTimingCut (dev, timing only: the sets are WRONG by design): what a
  // variant leaves out, to time it by difference. 1: the main loop's
  // candidate stores (the counts still grow, so the compactions and the
  // block-end select see the same amounts, of stale entries); 2: the
  // block-end select (rows are reported safe, nothing is written). Cut 1
  // acts on the default appends only (not with kLeanFilter); session 13
  // found it measures nothing useful (39 ran 5x slower on stale entries).
  // 4: the compaction checks after the gate (their named barriers): the sets
  // stay exact only while no segment would pass its trigger (gaussian rows at
  // the headline: no compactions, `v3check stats`); a segment past its cap
  // then overwrites the next one. Timing on such inputs only.
  static constexpr int kTimingCut = kTimingCut_;
  // kLeanFilter: the tile filter's pass flags without short-circuits (in
  // range & above the threshold: no predicate-to-byte round trips, 12-16
  // instructions fewer per tile in 32's loops) and the appends' addresses
  // from 32-bit word offsets (one wide multiply-add per store).
  static constexpr bool kLeanFilter = kLeanFilter_;
  // (kShares, session 19: each visit flushes its pending tail before its
  // checks, its gate and its end, as a whole block does; not with kLazyCheck,
  // whose check slots assume one visit per block.)
  static_assert(!kPipeTail || (kLeanFilter && (!kShares_ || !kLazyCheck_) && !kEarlyWeights_ && kTimingCut_ == 0),
                "kPipeTail: on the lean filter (with kShares: no kLazyCheck)");
  // kShares (issue 12, and the last wave of every call): the call's key tiles
  // are cut into equal contiguous shares, one per CTA, as the dense kernel
  // does (fused_split_share), instead of whole blocks from a counter. A block
  // whose tiles fall in several shares is split: each piece first scans its
  // own sample tiles (kSplitSampleTiles at most) into the tail of its
  // segments and publishes them; every piece then ranks one gate for the
  // whole row from all the pieces' samples (the same value everywhere: the
  // same entries in the same order), keeps its sample entries at or above it,
  // scans the rest of its tiles with that gate, and publishes its counts; the
  // last piece to finish (an atomic counter per block) selects each row over
  // all the pieces' candidates. Whole blocks inside a share run as before.
  // See "v3 shares" below the configurations.
  static constexpr bool kShares = kShares_ != 0;
  // kShares_ == 2 (dev variant 34): a whole block inside a share runs as a
  // split block of one piece too (a sample visit, then a rest visit with the
  // gate from its own sample: session 11's round 4 design), where 1 runs it
  // on the unshared kernel's path (its gate, drop and block-end select).
  static constexpr bool kWholePieces = (kShares_ & 2) != 0;
  // kShares_ & 4 (dev variants 35, 36): shares only over the blocks that do
  // not fill whole waves (fused_v3_share_blocks: the lowest-numbered, the
  // shortest of a causal chunk); the other blocks run whole, handed out by
  // the block counter after the CTA's share, largest first, as variant 32.
  static constexpr bool kHybrid = (kShares_ & 4) != 0;
  // kRankFloorZ: the gate's sample rank is at least mu + z sqrt(mu), mu the
  // sample entries expected at or above the row's k-th (fused_select.cuh,
  // gate_rank_floor), so a row falls under k (and its block is redone) only
  // past z standard deviations, also where the sample is capped; 0: no floor.
  static constexpr int kRankFloorZ = kRankFloorZ_;
  // kFloorCappedOnly: the floor applies only where the target's rank is under
  // kGateRank (the sample was capped at kMaxSampleTiles: long rows, where a
  // redo is a long block's ungated rescan late in the launch). Elsewhere the
  // target's rank is ~128 or more, 3.6 deviations or more above mu at
  // 1.25 k + 256, and a rare redo of a short block costs about one block.
  static constexpr bool kFloorCappedOnly = kFloorCappedOnly_;
  // kGateTargetQ: the gate's candidate target, k + kGateTargetQ * k / 4 + 256
  // (2: fused_gate_target, the v2 kernel's 1.5 k + 256; 1: 1.25 k + 256). The
  // sample rank stays about 128 (fused_sample_tiles), so the candidates a gated
  // row keeps are about target * (1 +- 1 / sqrt(128)) whatever the value
  // distribution (the sample entries above the row's k-th largest logit are
  // hypergeometric); a row falls under k, and is redone, when more than rho of
  // them are above its k-th: at kGateTargetQ = 1 that is 3.6 standard
  // deviations at k = 2048 (4.6 at 1024, 6.4 at 512), about 1.6e-4 of rows.
  static constexpr int kGateTargetQ = kGateTargetQ_;
  static constexpr int gate_target(int k) { return fused_detail::fused_gate_target(k) + (kGateTargetQ - 2) * (k / 4); }
  static_assert(kGateTargetQ >= 1 && kGateTargetQ <= 4, "gate target: k + (1..4) k / 4 + 256");
  // kOutGroups (with kGateRange): key / index groups in flight per lane in the
  // pair select's gather + output pass (4; 28 tried 6: slower).
  static constexpr int kOutGroups = kOutGroups_;
  // kGateRange (needs kPairGate): the pair gate also keeps each gated row's
  // largest sample key, and the block end's pair select of a row still at its
  // gate bins [gate, that key] directly (pair_finish_row_gated: no range pass).
  static constexpr bool kGateRange = kGateRange_;
  // kSelPhases (dev): probe 2 also counts the pair select's phases (cycles of
  // the first warp: range pass, histogram levels, gather + output pass, the
  // scratch finish; stats words 2, 11, 12, 14).
  static constexpr bool kSelPhases = kSelPhases_;
  // kLazyDrop: after the gate, a block whose sample is small leaves its
  // sample entries below the gate in the segments (they are not eligible at
  // the block end or in a compaction: eligibility is key >= the threshold's,
  // and a compaction keeps only what is at or above its threshold) instead of
  // dropping them: when 16 ns + 1.25 x target / 8, the sample plus a generous
  // share of the expected candidates per segment, stays under the compaction
  // trigger. Larger samples are dropped as before.
  static constexpr bool kLazyDrop = kLazyDrop_;
  // kPairGate (needs kPairSelect): the sample gate's select by the same pairs
  // (fused_select.cuh, pair_select; fused_v3_gate_pair_call).
  static constexpr bool kPairGate = kPairGate_;
  // kPairSelect: the synchronous block end selects each row with both of the
  // row group's warps that hold it (fused_select.cuh, pair_finish_row; warp w
  // of key groups 0 and 1, named barrier 8 + row), instead of one warp per row
  // while the key group 1 warps wait.
  static constexpr bool kPairSelect = kPairSelect_;
  // kAsyncSelect: the block-end selects run on the producer warpgroup's three
  // spare warps (fused_v3_select_loop) while the math warps scan the next
  // block into the other candidate set (needs kSets = 2).
  static constexpr bool kAsyncSelect = kAsyncSelect_;
  // kInlineCheck (dev): the compaction check inlined into the tile loops instead of called.
  static constexpr bool kInlineCheck = kInlineCheck_;
  // kWeightsMode: 0 the block's weights in registers, 1 a per-lane copy in
  // shared memory (wl, 8 x 16-byte loads per tile), 2 (dev) read each tile from
  // the TMA-loaded weights buffer (16 x 8-byte loads), 3 (dev) 1 with a row
  // group barrier after the copy.
  static constexpr int kWeightsMode = kWeightsMode_;
  static constexpr bool kSmemWeights = kWeightsMode_ != 0;
  // The dense op's configuration (constants and MMA shape only).
  using Logits = Sm90LogitsV2Config<8, 4, 8, 0, 112, 1, true, 2, true, true>;
  static constexpr int kNumStages = kNumStages_;
  static constexpr int kSets = kSets_;
  static constexpr int kCheckTiles = kCheckTiles_;
  static constexpr int kBlockRows = 8;
  static constexpr int kSegs = 8;             // candidate segments per row (its 8 warps)
  static constexpr int kMathWarpgroups = 4;
  static constexpr int kThreads = 640;
  static constexpr int kMathThreads = 512;
  // setmaxnreg: the math warps' registers; the producer warpgroup takes what
  // is left of the CTA's 640 x 96 (112 / 32, or 104 / 64 for kAsyncSelect's
  // selector warps).
  static constexpr int kMathRegs = kMathRegs_;
  static constexpr int kProducerRegs = (((65536 / kThreads) & ~7) * kThreads - kMathRegs * kMathThreads) / 128 / 8 * 8;
  static constexpr int kBlockKeys = 128;
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
  // [set][parity][row][seg]: consecutive publications (compaction checks, gate,
  // block end) alternate, since a warp may publish the next while a slower one
  // of its row group still reads this one (at most one ahead: the next barrier).
  static constexpr int kOffSegCnt = kOffScratch + 8 * 2 * fused_detail::kScratch * 4;
  static constexpr int kOffThr = kOffSegCnt + kSets * 2 * 8 * kSegs * 4;               // [set][row] u64
  // The producer's description of a block (kShares: of a visit), per Q buffer.
  static constexpr int kSlotInts = kShares ? 16 : 8;
  static constexpr int kOffSlot = kOffThr + kSets * 8 * 8;                             // [2][kSlotInts] int
  // (kSplitRG: [rg][2][kSlotInts], a row group's own two Q buffers)
  static constexpr int kOffRedo = kOffSlot + (kSplitRG ? 4 : 2) * kSlotInts * 4;      // [set][rg] u32
  // kSmemWeights: each lane's 32 weights of the block, contiguous ([qb][rg][quad][r][jj]: 8 x 16 B).
  static constexpr int kOffWl = kOffRedo + 2 * 2 * 4;  // (16-byte aligned below)
  static constexpr int kOffWlA = (kOffWl + 15) / 16 * 16;
  static constexpr int kOffCtl = kOffWlA + (kWeightsMode == 1 || kWeightsMode == 3 ? 2 * 2 * 4 * 32 * 4 : 0);
  // kAsyncSelect: the selector warps' hist + scratch ([warp][256 + 2 kScratch]),
  // the handed-over block ([set][b, active, -, -]), its final segment counts
  // ([set][row][seg]), whether each row was gated ([set][row]), rows to redo ([set]).
  static constexpr int kSelWarps = 3;
  static constexpr int kSelWords = 256 + 2 * fused_detail::kScratch;
  static constexpr int kOffSelHist = kOffCtl + (static_cast<int>(sizeof(FusedV3Ctl)) + 15) / 16 * 16;
  static constexpr int kOffSelInfo = kOffSelHist + (kAsyncSelect ? kSelWarps * kSelWords * 4 : 0);
  static constexpr int kOffFinCnt = kOffSelInfo + (kAsyncSelect ? 2 * 4 * 4 : 0);
  static constexpr int kOffGated = kOffFinCnt + (kAsyncSelect ? 2 * 8 * kSegs * 4 : 0);
  static constexpr int kOffSelRedo = kOffGated + (kAsyncSelect ? 2 * 8 * 4 : 0);
  static constexpr int kOffPairX = kOffSelRedo + (kAsyncSelect ? 2 * 4 : 0);  // kPairSelect: [row][16] exchange words
  // kPairSelect: [row][16] exchange words; then (kGateRange) [row] the gated rows' largest sample keys.
  static constexpr int kOffSmax = kOffPairX + (kPairSelect ? 8 * 16 * 4 : 0);
  // kLazyCheck: [parity][row][seg] the counts of the last two checks.
  static constexpr int kOffCkc = kOffSmax + (kGateRange ? 8 * 4 : 0);
  // kSplitRG: the second row group's redo queue (FusedV3Rq; the first's is in FusedV3Ctl).
  static constexpr int kOffRq1 = (kOffCkc + (kLazyCheck ? 2 * 8 * kSegs * 4 : 0) + 15) / 16 * 16;
  static constexpr int kOffBars = (kOffRq1 + (kSplitRG ? 256 : 0) + 7) / 8 * 8;
  // K full / empty, Q full / empty ([rg][2] with kSplitRG), and (kAsyncSelect) set handed over / set free.
  static constexpr int kNumBars = 2 * kNumStages + (kSplitRG ? 8 : 4) + (kAsyncSelect ? 4 : 0);
  // kShares: FusedV3Shr after the barriers (static_assert below the struct).
  static constexpr int kOffShr = (kOffBars + kNumBars * 8 + 15) / 16 * 16;
  static constexpr int kSmemBytes = kOffShr + (kShares ? 576 : 0) + 1024;
  static_assert(kSmemBytes <= 227 * 1024 - (kShares ? 384 : 0), "shared memory per CTA (kShares: + fused_split_share's)");
  static_assert(!kEarlyWeights || kWeightsMode == 2, "kEarlyWeights loads the weights from the TMA buffer (kWeightsMode 2)");
  static_assert(!kShares || (kSets == 1 && !kAsyncSelect && kPairSelect && kPairGate),
                "shares: one candidate set per region, pair selects");
  // kShares: a split piece's sample tiles, at most (their entries fill the
  // last kTail slots of each segment, so the scan of the piece has cap - kTail).
  static constexpr int kSplitSampleTiles = 12;
  static constexpr int kTail = 16 * kSplitSampleTiles;
  static_assert(kSets == 1 || kSets == 2, "one or two candidate sets");
  static_assert(!kAsyncSelect || kSets == 2, "asynchronous selects need two candidate sets");
  static_assert(!(kAsyncSelect && kPairSelect), "pair selects are the synchronous block end's");
  static_assert(!kPairGate || kPairSelect, "the pair gate uses the pair select's exchange words");
  static_assert(!kGateRange || kPairGate, "the gate range comes from the pair gate");
  static_assert(kCheckTiles >= 1 && kCheckTiles <= 16, "compaction check interval");
  static_assert(kProducerRegs >= 24 && kMathRegs * kMathThreads + kProducerRegs * 128 <= ((65536 / kThreads) & ~7) * kThreads,
                "setmaxnreg split exceeds the CTA's registers");
  // Candidates per (row, warp) segment: the v2 kernel's two (k + 1920) per row
  // spread over 8 segments; the trigger (cap - 16 kCheckTiles) stays above a
  // sample's 16 x kMaxSampleTiles entries and above k / 8 (a compacted row).
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
constexpr int kRecGate = 21;  // (kSplitHist bit 32: the block's shared gate key of the row, in the first piece's record)
constexpr int kRecListFloor = 22;  // (kSplitHist bit 2048: the piece's key list of the row holds every sample key >= it)
constexpr int kShareRegions = 3;
constexpr int kShareHistWords = 8 * 256;  // kSplitHist: a region's 8 rows x 256 bins, twice (sample, final)
constexpr int kVisitWhole = 0, kVisitSample = 1, kVisitRest = 2;
constexpr int kShareMinTiles = 8;  // the fewest tiles a share gets (fewer CTAs on tiny calls)
constexpr int kListGatePieces = 16;  // kListGate: the most pieces of a block with published key lists (np J <= 512)
// kListGate: the keys a piece lists per row for np pieces (the first half of
// its sample-bin row; the bins, 16 bits each, fill the second half).
__host__ __device__ constexpr int fused_list_keys(int np) { return np <= 4 ? 128 : np <= 8 ? 64 : 32; }
static_assert(kListGatePieces * fused_list_keys(kListGatePieces) <= 512 && 4 * fused_list_keys(4) <= 512 &&
                  8 * fused_list_keys(8) <= 512,
              "kListGate: every block's lists fit 16 keys a lane");

// kShares: the CTA's share and the split visits' per-row state (shared memory).
struct FusedV3Shr {
  long long sh_g0, sh_count, sh_total;  // fused_split_share
  int sh_b0, sh_t0, sh_gp;
  int sh_m;                             // pieces per block where they follow the blocks (fused_v3_align_piece; 0: equal shares)
  int last[2];                          // per row group: this CTA merges the block it just finished
  int dist[2];                          // kSplitHist bit 16, per row group: every piece merges its own entries
  int bad[8];                           // kSplitHist bit 16, per row: this piece's pass disagreed with its bins
  uint32_t gkey[8];                     // the split visit's shared gate key per row (0: none)
  uint32_t rest_cnt[16][4];             // per math warp and row: its count after a rest visit's start
  // Per row group and Q buffer: the visit's fields after its tile loops (every
  // warp of the row group writes the same values at the visit's start; the
  // row group's warps are never a visit apart: each visit ends at its barrier).
  int vis[2][2][12];
};
static_assert(sizeof(FusedV3Shr) <= 576, "kShares: the shared-memory room of Sm90FusedV3Config::kSmemBytes");

template <class Cfg>
inline size_t fused_v3_workspace_bytes(int topk, int num_sms) {
  if constexpr (Cfg::kShares)
    return kFusedHeaderBytes + size_t(num_sms) * kShareCtaWords * 4 +
           size_t(kShareRegions) * size_t(num_sms) * 8 * Cfg::kSegs * 2 * size_t(Cfg::cap(topk)) * 4 +
           (Cfg::kSplitHist ? size_t(kShareRegions) * size_t(num_sms) * 2 * kShareHistWords * 4 : 0);
  return kFusedHeaderBytes + size_t(Cfg::kSets) * size_t(num_sms) * 8 * Cfg::kSegs * 2 * size_t(Cfg::cap(topk)) * 4;
}

// Word offset (from p.ws) of this CTA's candidate set cs (kShares: region cs).
template <class Cfg>
__device__ __forceinline__ size_t fused_v3_set_off(const Sm90FusedParams& p, int cs) {
  const size_t set_words = size_t(8) * Cfg::kSegs * 2 * size_t(p.cap);
  if constexpr (Cfg::kShares)
    return size_t(gridDim.x) * kShareCtaWords + (size_t(blockIdx.x) * kShareRegions + cs) * set_words;
  else
    return (size_t(blockIdx.x) * Cfg::kSets + cs) * set_words;
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
  if constexpr (Cfg::kRankFloorZ > 0) {
    if (rho && (!Cfg::kFloorCappedOnly || rho < static_cast<uint32_t>(kGateRank))) {
      rho = max(rho, gate_rank_floor(m, n, static_cast<uint32_t>(p.topk), Cfg::kRankFloorZ));
      if (rho >= m) rho = 0;  // the margin needs more than the sample: no gate
    }
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

// The gate of row r (one warp, after the row group's sample counts are in
// segcnt): the key of sample rank rho among the row's sample
// entries (the exact select over its 8 segments), capped at the C-th largest
// of the sample tiles' maxima (C = min(4, ns): scores correlated with position
// make the keys of one tile alike, and a gate inside the top sampled tile
// would keep too few; fused_select.cuh, warp_gate_key). Sets thr_s[r] and
// clears the tile maxima; returns whether the row is gated.
template <class Cfg>
__device__ __forceinline__ bool fused_v3_gate(const Sm90FusedParams& p, const uint32_t* ws_set,
                                              const uint32_t* segcnt, unsigned long long* thr_s, FusedV3Ctl* ctl,
                                              uint32_t* hist_all, uint32_t* scratch_all, unsigned long long* stats,
                                              int b, int r, uint32_t active, int ns) {
  using namespace fused_detail;
  constexpr int NS = Cfg::kSegs;
  const int lane = threadIdx.x & 31;
  const int row = fused_v3_row<Cfg>(b, r);
  const uint32_t seg_stride = 2u * static_cast<uint32_t>(p.cap);
  uint32_t* hist = hist_all + r * 256;
  uint32_t* sk = scratch_all + r * 2 * kScratch;
  uint32_t* si = sk + kScratch;
  const uint32_t rho = fused_v3_gate_rho<Cfg>(p, segcnt + r * NS, row, r, active, lane);
  uint32_t gk = 0;
  if (rho) {
    const SegLanes sl = make_seg_lanes(ws_set + size_t(r * NS) * seg_stride, seg_stride,
                                       static_cast<uint32_t>(p.cap), segcnt + r * NS, NS, lane);
    const uint64_t th = warp_select_lean(sl, 0, rho, hist, sk, si, lane);
    gk = fused_v3_cap_gate(ctl, r, ns, static_cast<uint32_t>(th >> 32), lane);
  }
  fused_v3_set_gate(p, ctl, thr_s, stats, r, gk, lane);
  return gk != 0;
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
    uint32_t fast = 0;  // kFastGate: the one-pass gate (0: none, run the exact select)
    if constexpr (Cfg::kFastGate) {
      const uint32_t smax = __reduce_max_sync(0xffffffffu, ctl->tile_max[r][lane]);
      fast = pair_gate_fast(rw.half_segs(p), pc, rho, smax, rw.hist, lane);
      th = static_cast<uint64_t>(fast) << 32;
    }
    if (fast == 0 && !pair_select(rw.half_segs(p), pc, 0, rho, rw.hist, rw.sk, rw.si, lane, &th, &c_unused) && kg == 0)
      th = warp_select_lean(rw.all_segs(p), 0, rho, rw.hist, rw.sk, rw.si, lane);  // heavy ties: one warp
    if (kg == 0) gk = fused_v3_cap_gate(ctl, r, ns, static_cast<uint32_t>(th >> 32), lane);
  }
  if (kg == 0) {
    if constexpr (Cfg::kGateRange) {  // the row's largest sample key (0: not gated)
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
  int res;
  if constexpr (Cfg::kSelPhases) {
    const long long t0 = clock64();
    long long t1 = t0, t2 = t0, t3 = t0, t4 = t0;
    res = pair_finish_row(ps, pc, thr, k, need, gated, start, hist, sk, si, lane, &cands,
                          [&](int at, int v, uint32_t) { orow[at] = v; }, [&](int i) {
                            const long long t = clock64();
                            if (i == 0) t1 = t;
                            if (i == 1) t2 = t;
                            if (i == 2) t3 = t;
                            if (i == 3) t4 = t;
                          });
    if (kg == 0 && p.probe == 2 && lane == 0 && res > 0) {
      t2 = max(t2, t1);
      t3 = max(t3, t2);
      t4 = max(t4, t3);
      atomicAdd(stats + 2, static_cast<unsigned long long>(t1 - t0));
      atomicAdd(stats + 11, static_cast<unsigned long long>(t2 - t1));
      atomicAdd(stats + 12, static_cast<unsigned long long>(t3 - t2));
      atomicAdd(stats + 14, static_cast<unsigned long long>(t4 - t3));
    }
  } else if constexpr (Cfg::kGateRange) {
    const uint32_t smax = reinterpret_cast<const volatile uint32_t*>(smem + Cfg::kOffSmax)[r];
    auto outf = [&](int at, int v, uint32_t) { orow[at] = v; };
    res = pair_finish_row_gated<decltype(outf)&, PairNoMark, Cfg::kOutGroups>(ps, pc, thr, smax, k, need, gated, start,
                                                                             hist, sk, si, lane, &cands, outf);
  } else {
    res = pair_finish_row(ps, pc, thr, k, need, gated, start, hist, sk, si, lane, &cands,
                          [&](int at, int v, uint32_t) { orow[at] = v; });
  }
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

// The split protocol's fences (kShares). A piece publishes by: every thread
// stores, the row group's barrier, then one thread fences and counts (the
// barrier orders the others' stores before its fence, as cooperative groups'
// grid sync does); a reader polls the count, fences, then loads.
// kSplitHist bit 256 (session 20): those fences as fence.acq_rel.gpu, and no
// fence of each writer's own before the barrier (fused_v3_fence_pub); without
// it each is __threadfence() (fence.sc.gpu: ncu's membar stalls, 2% of the
// 64-row kernel's warp samples).
template <class Cfg>
__device__ __forceinline__ void fused_v3_fence() {
  if constexpr ((Cfg::kSplitHist & 256) != 0)
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
  else
    __threadfence();
}
template <class Cfg>
__device__ __forceinline__ void fused_v3_fence_pub() {
  if constexpr ((Cfg::kSplitHist & 256) == 0) __threadfence();
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

// Development probe 8 (kShares; tools/v3check `timeline`, which allocates
// the room): thread 0's global-timer marks (low 32 bits, ns) after the
// output's rows x topk words, CTA c's visit qi mark id at word c * 128 +
// (qi & 7) * 16 + id (ids: 1 the visit's tile loops
// done, 2 its publication / merge done, 3 the next visit's start done, 4 that
// visit's Q in, 5 its gate's wait done, 6 its gate done, 7 its copy done; the
// merge's in visit slot 7: 8 entry, 9 bins published, 10 counted, 11 merged;
// 15 the math warps' start in slot 0).
// Compiled only into the dev configurations with kSplitHist bit 8 (67, 76, 90):
// a mark's code in the split calls costs 66's tile loops 10 instructions.
template <class Cfg>
__device__ __forceinline__ void fused_v3_mark(const Sm90FusedParams& p, int qi, int id) {
  if constexpr ((Cfg::kSplitHist & 8) != 0) {
    if (p.probe == 8 && threadIdx.x == 0) {
      uint32_t t;
      asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t));
      __stcg(reinterpret_cast<uint32_t*>(p.out) + size_t(p.rows) * p.topk + blockIdx.x * 128u +
                 static_cast<uint32_t>((qi & 7) * 16 + id), t);
    }
  }
}

// kSplitHist: row r's published bins (which: 0 the sample's, 1 the final
// candidates') of the piece in region (c, slot), after the candidate regions.
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
// kListGate (kSplitHist bit 2048), a sample visit's end: row r's pair
// publishes, in the row's sample-bin row (fused_v3_hist(.., 0, r), 256
// words): words [0, J) the piece's sample keys (its half's segments ps, both
// warps) in the bins of hist (the 256 bins of 2^16 keys below smax, complete:
// both warps' counts are in) that hold at most J = fused_list_keys(np) keys
// in all (the first warp's from word 0 up, the second's from word J - 1 down,
// 0 between), words [128, 256) the 256 bins at 16 bits (bin 2 i in word 128 +
// i's low half), and in its record (kRecListFloor) the lowest key the list is
// complete above, its floor. Clears this warp's half of hist. np <=
// kListGatePieces, warp-uniform.
template <class Cfg>
__device__ __forceinline__ void fused_v3_publish_list(const Sm90FusedParams& p, int reg, int r, int kg, uint32_t smax,
                                                      const fused_detail::PieceSegs& ps, fused_detail::PairCtx& pc,
                                                      uint32_t* hist, int lane, int np) {
  using namespace fused_detail;
  const uint32_t J = static_cast<uint32_t>(fused_list_keys(np));
  uint32_t tot = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) tot += hist[j * 32 + lane];
  tot = __reduce_add_sync(0xffffffffu, tot);
  uint32_t bin = 256u, before = 0, in_bin = 0;  // (bins below `bin` hold at most J keys)
  if (tot > J) bin = warp_find_digit_t<false>(hist, J + 1u, false, &before, &in_bin, lane);
  uint32_t* dst = fused_v3_hist<Cfg>(p, blockIdx.x, reg, 0, r);
  {  // this warp's 128 bins packed: bins kg 128 + 4 lane .. + 3 into words 128 + kg 64 + 2 lane, + 1
    const uint4 h = *reinterpret_cast<const uint4*>(hist + kg * 128 + lane * 4);
    __stcg(reinterpret_cast<uint2*>(dst + 128 + kg * 64 + lane * 2),
           make_uint2((h.x & 0xffffu) | (h.y << 16), (h.z & 0xffffu) | (h.w << 16)));
  }
  pair_sync(pc.bar);  // both warps have read the histogram
  *reinterpret_cast<uint4*>(hist + kg * 128 + lane * 4) = make_uint4(0u, 0u, 0u, 0u);
  const uint32_t lim = bin << 16;  // (a key is listed when smax - key < lim)
  if (kg == 0 && lane == 0)
    __stcg(fused_v3_rec(p, blockIdx.x, reg) + r * 32 + kRecListFloor, smax >= lim ? smax - lim + 1u : 1u);
  const uint32_t lt = (1u << lane) - 1u;
  uint32_t pos = 0;
  pair_for_each(ps, lane, [&](uint32_t key, bool valid) {
    const bool in = valid && key >= 1u && key <= smax && smax - key < lim;
    const uint32_t m = __ballot_sync(0xffffffffu, in);
    const uint32_t at = pos + static_cast<uint32_t>(__popc(m & lt));
    if (in && at < J) __stcg(dst + (kg == 0 ? at : J - 1u - at), key);
    pos += static_cast<uint32_t>(__popc(m));
  });
  const uint4 o = pair_exchange(pc, make_uint4(pos, 0u, 0u, 0u), lane);
  const uint32_t n0 = min(kg == 0 ? pos : o.x, J), n1 = min(kg == 0 ? o.x : pos, J - n0);
  for (uint32_t j = n0 + static_cast<uint32_t>(kg * 32 + lane); j + n1 < J; j += 64) __stcg(dst + j, 0u);
}

// kListGate's shared gate of row r (np <= kListGatePieces, warp-uniform): the
// rho-th largest of the np pieces' published key lists (fused_v3_publish_list),
// 16 keys a lane loaded at once, ranked from registers (warp_rank_regs);
// 0 when the lists hold fewer than rho nonzero keys. The caller checks it
// against the pieces' floors. One warp; both warps of the pair compute the same.
template <class Cfg>
__device__ __forceinline__ uint32_t fused_v3_union_gate_list(const Sm90FusedParams& p, int c0, int slot0, int np, int r,
                                                             uint32_t rho, int lane) {
  const int J = fused_list_keys(np);
  const int lj = __ffs(J) - 1;  // (J a power of two)
  const int total = np * J;
  constexpr int kL = 512 / 32;
  uint32_t x[kL];
#pragma unroll
  for (int j = 0; j < kL; ++j) {
    const int e = j * 32 + lane;
    const int i = e >> lj;
    x[j] = e < total ? __ldcg(fused_v3_hist<Cfg>(p, c0 + i, i == 0 ? slot0 : 0, 0, r) + (e & (J - 1))) : 0u;
  }
  return rho >= 1u ? fused_detail::warp_rank_regs(x, rho) : 0u;
}

template <class Cfg, bool kPub = false>  // (below: the shared gate)
__device__ __forceinline__ bool fused_v3_union_gate_call(const Sm90FusedParams* pp, int reg, int b, int c0, int slot0,
                                                      int np, int qi = 0);
template <class Cfg>
__device__ __noinline__ void fused_v3_split_sample_end(const Sm90FusedParams* pp, int reg, int c0, int slot0, int ns,
                                                       uint32_t cnt, int b, int np) {
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
  if constexpr ((Cfg::kSplitHist & 2) != 0) {  // the row's sample bins below the piece's largest sample key, published
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
    bool listed = false;
    if constexpr (Cfg::kListGate) {
      np = __shfl_sync(0xffffffffu, np, 0);  // (said warp-uniform: the visit's pieces)
      if (np <= kListGatePieces) {
        listed = true;
        fused_v3_publish_list<Cfg>(p, reg, r, kg, smax, ps, pc, hist, lane, np);
      }
    }
    if (!listed) {
      __stcg(reinterpret_cast<uint4*>(fused_v3_hist<Cfg>(p, blockIdx.x, reg, 0, r) + kg * 128 + lane * 4), *hv);
      *hv = make_uint4(0u, 0u, 0u, 0u);
    }
    fused_v3_fence_pub<Cfg>();
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
  [[maybe_unused]] volatile int* last = reinterpret_cast<FusedV3Shr*>(smem + Cfg::kOffShr)->last;
  if (slot0 < 2 && (tid & 255) == 0) {  // (a whole block, slot 2, has no other piece to tell)
    fused_v3_fence<Cfg>();
    const int done = atomicAdd(fused_v3_ctr(p, c0, slot0) + rg, 1);
    if constexpr (Cfg::kGatePub) {
      last[rg] = done == np - 1;
      fused_v3_fence<Cfg>();
    }
  }
  if constexpr (Cfg::kGatePub) {  // the block's last sampler ranks the row group's gates and publishes them
    ptx::named_barrier_sync(5 + rg, 256);
    if (last[rg]) {
      np = __shfl_sync(0xffffffffu, np, 0);  // (said warp-uniform)
      fused_v3_union_gate_call<Cfg, true>(pp, reg, b, c0, slot0, np);
      fused_v3_fence_pub<Cfg>();
      ptx::named_barrier_sync(5 + rg, 256);  // every row's gate key stored
      if ((tid & 255) == 0) {
        fused_v3_fence<Cfg>();
        atomicAdd(fused_v3_ctr(p, c0, slot0) + rg, 1);  // np + 1: the gates are out
      }
    }
  }
}

// kSplitHist bit 32, a rest visit's start (all math warps): waits for the
// block's published gates (the counter at np + 1) and takes row 4 rg +
// warp_in_wg's into gkey and thr_s, as fused_v3_union_gate_call sets them.
template <class Cfg>
__device__ __forceinline__ void fused_v3_gate_fetch(const Sm90FusedParams* pp, int reg, int b, int c0, int slot0, int np,
                                                    int qi) {
  const Sm90FusedParams& p = *pp;
  const FusedV3PairRow<Cfg> rw(p, reg, 0, b);
  const int r = rw.r, lane = rw.lane, kg = rw.kg, rg = r >> 2;
  if (np > 0) fused_v3_wait_ctr<Cfg>(p, c0, slot0, rg, np + 1);
  fused_v3_mark<Cfg>(p, qi, 5);
  if (kg == 0 && lane == 0) {
    const uint32_t gk = np > 0 ? __ldcg(fused_v3_rec(p, c0, slot0) + r * 32 + kRecGate) : 0u;
    FusedV3Shr* shr = reinterpret_cast<FusedV3Shr*>(rw.smem + Cfg::kOffShr);
    shr->gkey[r] = gk;
    reinterpret_cast<unsigned long long*>(rw.smem + Cfg::kOffThr)[r] = gk ? fused_detail::gate_threshold(gk) : 0ull;
  }
}

// kSplitHist bit 2: the shared gate of row r from the pieces' published
// sample bins (both warps of the row's pair; hist zero on entry and on exit):
// piece i's bin j (keys in (smax_i - (j + 1) 2^16, smax_i - j 2^16]) counts
// in bin j + ceil((M - smax_i) / 2^16) below the union's largest key M, the
// lower of the two it may fall in, so every entry counted in bins 0 .. J is at
// or above M - (J + 1) 2^16 + 1. Returns the lowest key of the bin that holds
// the rho-th (at least rho entries at or above it; never above the exact
// rho-th), or 0 when fewer than rho entries fall in the 256 bins.
// kRegs (kSplitHist bit 4, np <= 32): t0, lane i's piece i's largest sample
// tile maximum, already loaded (fused_v3_union_gate_call): no record loads
// here, and 8 pieces' bins in flight instead of 4 (16 cost the split kernel's tile loops 11
// instructions, 2026-12-04).
// kPacked (kListGate): the pieces' bins at 16 bits in the second half of
// their sample-bin rows (fused_v3_publish_list).
template <class Cfg, bool kRegs = false, bool kPacked = false>
__device__ __forceinline__ uint32_t fused_v3_union_gate_fast(const Sm90FusedParams& p, int c0, int slot0, int np, int r,
                                                             int kg, uint32_t rho, fused_detail::PairCtx& pc,
                                                             uint32_t* hist, int lane, uint32_t t0 = 0) {
  static_assert(!kPacked || (Cfg::kSplitHist & 64) == 0, "packed bins: the atomics' path");
  const uint32_t M = kRegs ? __reduce_max_sync(0xffffffffu, t0) : fused_v3_union_smax(p, c0, slot0, np, r, lane);
  const uint32_t j_lane = static_cast<uint32_t>(kg * 128 + lane * 4);
  np = __shfl_sync(0xffffffffu, np, 0);  // (said warp-uniform)
  constexpr int B = kRegs ? 8 : 4;
  if constexpr ((Cfg::kSplitHist & 64) != 0) {
    // (bit 64: each lane sums its own 4 union bins J from every piece's bin
    // J - shift, loaded at that offset, and stores them: no shared-memory
    // atomics, where the loop below adds each piece's 4 bins into the shifted
    // ones, 4 atomics per piece and lane at 4-way bank conflicts: at 16
    // pieces 15K cycles per row, 2026-12-04)
    uint32_t acc[4] = {0u, 0u, 0u, 0u};
#pragma unroll 1
    for (int i0 = 0; i0 < np; i0 += B) {
      uint32_t v[B][4];
#pragma unroll
      for (int u = 0; u < B; ++u) {
        const int i = i0 + u;
        const int c = c0 + (i < np ? i : 0), sl = i == 0 ? slot0 : 0;
        uint32_t smx;
        if constexpr (kRegs) {
          const uint32_t x = __shfl_sync(0xffffffffu, t0, i & 31);
          smx = i < np ? x : 0u;
        } else {
          smx = i < np ? __ldcg(fused_v3_rec(p, c, sl) + r * 32 + kRecTileMax) : 0u;
        }
        const uint32_t e = M - smx;  // (smx <= M)
        const uint32_t sh = (e >> 16) + ((e & 0xffffu) != 0u ? 1u : 0u);
        const uint32_t* hp = fused_v3_hist<Cfg>(p, c, sl, 0, r);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const uint32_t src = j_lane + static_cast<uint32_t>(q) - sh;  // (wraps past 255 when below 0)
          v[u][q] = smx != 0u && src < 256u ? __ldcg(hp + src) : 0u;
        }
      }
#pragma unroll
      for (int u = 0; u < B; ++u)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[q] += v[u][q];
    }
    *reinterpret_cast<uint4*>(hist + j_lane) = make_uint4(acc[0], acc[1], acc[2], acc[3]);
  } else {
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
      if constexpr (kPacked) {
        const uint2 w = i < np ? __ldcg(reinterpret_cast<const uint2*>(fused_v3_hist<Cfg>(p, c, sl, 0, r) + 128 + j_lane / 2))
                               : make_uint2(0u, 0u);
        h[u] = make_uint4(w.x & 0xffffu, w.x >> 16, w.y & 0xffffu, w.y >> 16);
      } else {
        h[u] = i < np ? __ldcg(reinterpret_cast<const uint4*>(fused_v3_hist<Cfg>(p, c, sl, 0, r) + j_lane))
                      : make_uint4(0u, 0u, 0u, 0u);
      }
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
// kPub (kSplitHist bit 32): called by the block's last sampler at its sample
// visit's end: no wait (every piece's sample is in), and the gate key goes to
// the first piece's record (kRecGate) instead of this CTA's thr_s and gkey.
template <class Cfg, bool kPub>
__device__ __forceinline__ bool fused_v3_union_gate_call(const Sm90FusedParams* pp, int reg, int b, int c0, int slot0,
                                                      int np, int qi) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  const FusedV3PairRow<Cfg> rw(p, reg, 0, b);
  const int r = rw.r, lane = rw.lane, kg = rw.kg, rg = r >> 2;
  const int tid = threadIdx.x;
  // (Every warp waits for itself, on a warp-uniform condition: a loop the
  // compiler cannot prove uniform in this call makes the tile loops' values
  // non-uniform after it, and costs them their registers.)
  (void)tid;
  const long long tw0 = clock64();
  if (!kPub && np > 1) fused_v3_wait_ctr<Cfg>(p, c0, slot0, rg, np);
  fused_v3_mark<Cfg>(p, qi, 5);
  if (Cfg::kSplitHist != 0 && p.probe == 2 && lane == 0)  // (kSplitHist, probe 2: the wait for the samples, word 2)
    atomicAdd(rw.stats + 2, static_cast<unsigned long long>(clock64() - tw0));
  // (dev variant 67, probe 7: clock marks between the gate's steps, words 7-10 and 12)
  const bool mk7 = (Cfg::kSplitHist & 8) != 0 && p.probe == 7 && kg == 0 && lane == 0;
  long long tq = 0;
  auto mark7 = [&](int w) {
    if constexpr ((Cfg::kSplitHist & 8) != 0) {
      if (mk7) {
        const long long t = clock64();
        if (w > 0) atomicAdd(rw.stats + w, static_cast<unsigned long long>(t - tq));
        tq = t;
      }
    }
  };
  mark7(0);
  unsigned long long* thr_s = reinterpret_cast<unsigned long long*>(rw.smem + Cfg::kOffThr);
  FusedV3Shr* shr = reinterpret_cast<FusedV3Shr*>(rw.smem + Cfg::kOffShr);
  uint32_t m = 0, tiles = 0;
  uint32_t tmx[4] = {0u, 0u, 0u, 0u};  // kSplitHist bit 4 (np <= 32): lane i's piece i's 4 largest tile maxima
  constexpr bool kRegMax = (Cfg::kSplitHist & 4) != 0;
  uint32_t lfloor = 0;  // kListGate: the pieces' largest list floor
  for (int i0 = 0; i0 < np; i0 += 32) {
    const int i = i0 + lane;
    if (i < np) {
      const uint32_t* rec = fused_v3_rec(p, c0 + i, i == 0 ? slot0 : 0) + r * 32;
#pragma unroll
      for (int sg = 0; sg < 8; ++sg) m += __ldcg(rec + kRecSample + sg);
      tiles += __ldcg(rec + kRecTiles);
      if constexpr (Cfg::kListGate) lfloor = max(lfloor, __ldcg(rec + kRecListFloor));
      if constexpr (kRegMax) {
        if (np <= 32) {
#pragma unroll
          for (int q = 0; q < 4; ++q) tmx[q] = __ldcg(rec + kRecTileMax + q);
        }
      }
    }
  }
  m = __reduce_add_sync(0xffffffffu, m);
  tiles = __reduce_add_sync(0xffffffffu, tiles);
  if constexpr (Cfg::kListGate) lfloor = __reduce_max_sync(0xffffffffu, lfloor);
  mark7(7);
  if (!kPub) fused_v3_mark<Cfg>(p, qi, 12);  // (probe 8: the records are in)
  int start_unused;
  const uint32_t n = rw.row < p.rows ? static_cast<uint32_t>(row_length(p, rw.row, &start_unused)) : 0u;
  const uint32_t rho = np > 0 ? fused_v3_gate_rho_mn<Cfg>(p, m, n, r, 0xffu) : 0u;  // (np 0: a redo, no gate)
  mark7(8);
  if (!kPub) fused_v3_mark<Cfg>(p, qi, 13);  // (probe 8: rho)
  uint32_t gk = 0;
  if constexpr ((Cfg::kSplitHist & 8) != 0) {  // (dev, probe 6: dependent loads in the loaded kernel, words 1 / 6)
    if (p.probe == 6 && kg == 0 && lane == 0 && np > 1) {
      const uint32_t zero = static_cast<uint32_t>(clock64() >> 62);  // (0, unknown to the compiler: a real dependence)
      uint32_t v = 0;
      const long long t0 = clock64();
#pragma unroll 1
      for (int i = 0; i < 16; ++i) v = __ldcg(fused_v3_rec(p, c0 + (i % np), 0) + r * 32 + kRecTiles + (v & zero));
      const long long t1 = clock64();
      atomicAdd(rw.stats + 1, static_cast<unsigned long long>(t1 - t0) + (v & zero));
      atomicAdd(rw.stats + 6, 16ull);
    }
  }
  if (rho) {
    PairCtx pc = rw.ctx();
    uint64_t th = 0;
    uint32_t c_unused = 0;
    uint32_t fast = 0;
    if constexpr ((Cfg::kSplitHist & 2) != 0) {
      if (Cfg::kListGate && np <= kListGatePieces) {
        // (the lists' rank is the union's exact rank at or above every floor;
        // below one, the packed bins: warp-uniform, the same in both warps)
        const uint32_t g = fused_v3_union_gate_list<Cfg>(p, c0, slot0, np, r, rho, lane);
        if (g != 0u && g >= lfloor)
          fast = g;
        else if (kRegMax)
          fast = fused_v3_union_gate_fast<Cfg, true, Cfg::kListGate>(p, c0, slot0, np, r, kg, rho, pc, rw.hist, lane,
                                                                     tmx[0]);
        else
          fast = fused_v3_union_gate_fast<Cfg, false, Cfg::kListGate>(p, c0, slot0, np, r, kg, rho, pc, rw.hist, lane);
      } else if (kRegMax && np <= 32)
        fast = fused_v3_union_gate_fast<Cfg, true>(p, c0, slot0, np, r, kg, rho, pc, rw.hist, lane, tmx[0]);
      else
        fast = fused_v3_union_gate_fast<Cfg>(p, c0, slot0, np, r, kg, rho, pc, rw.hist, lane);
      th = static_cast<uint64_t>(fast) << 32;
    }
    mark7(9);
    if (!kPub) fused_v3_mark<Cfg>(p, qi, 14);  // (probe 8: the bins)
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
      const uint32_t tc = kRegMax && np <= 32 ? fused_v3_tile_cap_regs(tmx, c)
                                              : fused_v3_union_tile_cap(p, c0, slot0, np, r, c, lane);
      gk = min(static_cast<uint32_t>(th >> 32), tc);
    }
  }
  if (kg == 0 && lane == 0) {
    if constexpr (kPub) {
      __stcg(fused_v3_rec(p, c0, slot0) + r * 32 + kRecGate, gk);
    } else {
      shr->gkey[r] = gk;
      thr_s[r] = gk ? gate_threshold(gk) : 0ull;
    }
    if (gk && p.probe == 2) atomicAdd(rw.stats + 9, 1ull);
  }
  mark7(10);
  if constexpr ((Cfg::kSplitHist & 8) != 0) {
    if (mk7) atomicAdd(rw.stats + 12, 1ull);
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
    if constexpr (Cfg::kSplitHist != 0) {  // (every load of the row's tail in flight at once: kTail / 32 per lane)
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
      continue;
    }
    for (int j0 = 0; j0 < c; j0 += 32) {
      const int j = j0 + lane;
      const uint32_t key = j < c ? __ldcg(tail + j) : 0u;
      const uint32_t idx = j < c ? __ldcg(tail + cap + j) : 0u;
      const bool keep = j < c && key >= gk;  // (th = gk << 32: composite >= th is key >= gk)
      const uint32_t m = __ballot_sync(0xffffffffu, keep);
      if (keep) {
        const uint32_t at = kept + __popc(m & ((1u << lane) - 1u));
        __stcg(head + at, key);
        __stcg(head + cap + at, idx);
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
__device__ __noinline__ uint32_t fused_v3_split_rest_start(const Sm90FusedParams* pp, int qb, int b, int qi) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  const int rg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 256, 0);
  const volatile int* vis = reinterpret_cast<const FusedV3Shr*>(smem + Cfg::kOffShr)->vis[rg][qb];
  const int reg = __shfl_sync(0xffffffffu, vis[3], 0), c0 = __shfl_sync(0xffffffffu, vis[4], 0);
  const int slot0 = __shfl_sync(0xffffffffu, vis[5], 0), np = __shfl_sync(0xffffffffu, vis[6], 0);
  const long long tg0 = clock64();
  if constexpr (Cfg::kGatePub) {
    fused_v3_gate_fetch<Cfg>(pp, reg, b, c0, slot0, np, qi);
  } else {
    fused_v3_union_gate_call<Cfg>(pp, reg, b, c0, slot0, np, qi);
    if constexpr ((Cfg::kSplitHist & 128) != 0) {  // (dev, probe 8: the same gate again, its marks in visit slot 6)
      ptx::named_barrier_sync(5 + rg, 256);
      fused_v3_union_gate_call<Cfg>(pp, reg, b, c0, slot0, np, 6);
    }
  }
  fused_v3_mark<Cfg>(*pp, qi, 6);
  const long long tb0 = clock64();
  ptx::named_barrier_sync(5 + rg, 256);  // the row group's gates are in thr_s
  if ((Cfg::kSplitHist & 8) != 0 && pp->probe == 7 && (threadIdx.x & 31) == 0)  // (67, probe 7: the barrier, word 13)
    atomicAdd(reinterpret_cast<unsigned long long*>(pp->counter) + 1 + 13, static_cast<unsigned long long>(clock64() - tb0));
  if (Cfg::kSplitHist != 0 && pp->probe == 2 && (threadIdx.x & 31) == 0)  // (probe 2: the gate with its wait, word 1)
    atomicAdd(reinterpret_cast<unsigned long long*>(pp->counter) + 1 + 1, static_cast<unsigned long long>(clock64() - tg0));
  const uint32_t c = fused_v3_split_copy<Cfg>(pp, reg, np);
  fused_v3_mark<Cfg>(*pp, qi, 7);
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
  fused_v3_mark<Cfg>(*pp, qi, 4);
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

// kSplitHist bit 1, at a rest visit's end (all math warps, after the final
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
  fused_v3_fence_pub<Cfg>();
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

// kSplitHist bit 1, the block's last piece: row 4 rg + warp_in_wg's bins
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

// kSplitHist bit 16: the merge by every piece (issue 12). Called at a rest
// visit's end by the row group's 8 warps of every piece (np > 1), after the
// piece's final bins are published (hsmax: fused_v3_publish_final_bins'
// answer for the warp's row). `waiter`: this visit is the CTA's last share
// visit (no visit of this CTA's share comes later, so waiting here for the
// block's other pieces cannot hold up a piece: every piece counts itself
// before it waits, and a CTA waits at most once, at its share's end; the
// grid is resident, as the shared gate's wait already assumes).
// Each piece counts itself on the block's final counter (a waiter adds 1,
// another piece 2^16). A waiter then waits for every piece. When every piece
// is a waiter, each pair sums the pieces' final bins of its row, finds the
// k-th's bin (pair_row_core's fast path on the same sums: the same bin),
// and writes its own piece's entries above the bin to the output at the
// prefix of the lower pieces' counts above it (pair_emit_binned), and its
// entries in the bin to a block-wide scratch in global memory (piece 0's and
// piece 1's sample-bin areas: every piece has passed its gate once all have
// counted themselves, so no one reads them again). Then each piece counts
// itself again on the block's sample counter (np already: all sampled); the
// last ranks the bin's entries (finish_in_scratch) and writes the winners
// after the entries above. Rows where this does not apply (not gated, no
// bins, at most k candidates, the k-th in the top bin, more than kScratch
// in its bin) and row groups where a pass disagreed with its bins go to
// the last piece's merge over every piece (returns 1 there); so do all rows
// when some piece is not a waiter (then the last piece on the final counter
// merges, as without bit 16). Returns 0 (nothing more to do; safe) or 1.
// Deterministic: every position follows from the published counts and the
// passes' fixed order. Not inlined (its registers stay out of the tile loops').
template <class Cfg>
__device__ __noinline__ int fused_v3_split_dist(const Sm90FusedParams* pp, int reg, int b, int c0, int slot0, int np,
                                                uint32_t hsmax, uint32_t active, bool waiter) {
  using namespace fused_detail;
  const Sm90FusedParams& p = *pp;
  const FusedV3PairRow<Cfg> rw(p, 0, 0, 0);  // (its row from b below: as fused_v3_sum_final_bins')
  const int r = rw.r, lane = rw.lane, kg = rw.kg, rg = r >> 2, row = fused_v3_row<Cfg>(b, r);
  const int tid = threadIdx.x;
  FusedV3Shr* shr = reinterpret_cast<FusedV3Shr*>(rw.smem + Cfg::kOffShr);
  volatile int* vsh = reinterpret_cast<volatile int*>(shr->last);  // last[2], dist[2], bad[8]
  int* ctr1 = fused_v3_ctr(p, c0, slot0) + 2 + rg;  // the final counter
  int* ctr2 = fused_v3_ctr(p, c0, slot0) + rg;      // the sample counter (np: every piece sampled)
  np = __shfl_sync(0xffffffffu, np, 0);  // (said warp-uniform)
  if ((tid & 255) == 0) {
    __threadfence();
    const int v = atomicAdd(ctr1, waiter ? 1 : 0x10000);
    vsh[rg] = (v & 0xffff) + (v >> 16) == np - 1;
    __threadfence();
  }
  ptx::named_barrier_sync(5 + rg, 256);
  const bool last1 = vsh[rg] != 0;
  if (!waiter) return last1 ? 1 : 0;
  int w;  // every piece counted (each warp waits on its own: a warp-uniform loop)
  while (w = __shfl_sync(0xffffffffu, *reinterpret_cast<volatile int*>(ctr1), 0), (w & 0xffff) + (w >> 16) < np)
    __nanosleep(64);
  __threadfence();
  if ((w >> 16) != 0) return last1 ? 1 : 0;  // a piece did not wait: the last one merges
  const int me = __shfl_sync(0xffffffffu, static_cast<int>(blockIdx.x) - c0, 0);  // this piece's index (said uniform)
  const bool live = row < p.rows && ((active >> r) & 1u) && hsmax != 0u;
  const uint32_t gk = shr->gkey[r];
  const uint32_t k = static_cast<uint32_t>(p.topk);
  PairCtx pc = rw.ctx();
  const uint32_t j_lane = static_cast<uint32_t>(kg * 128 + lane * 4);
  bool dist = false;
  uint32_t above = 0, in_bin = 0, pre_hi = 0, pre_eq = 0, my_hi = 0, my_eq = 0, sel = 0;
  if (live) {
    // The pieces' summed bins (this warp's half of the row's 256), as the last piece sums them.
    constexpr int kB = 8;
    const uint4 a = fused_v3_sum_bins<Cfg, kB>(p, c0, slot0, np, r, j_lane);
    *reinterpret_cast<uint4*>(rw.hist + j_lane) = a;
    pair_sync(pc.bar);  // both halves are in
    uint32_t tot = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) tot += rw.hist[j * 32 + lane];
    const uint32_t c = __reduce_add_sync(0xffffffffu, tot);
    sel = 255u;
    if (c > k) sel = warp_find_digit_t<false>(rw.hist, k, true, &above, &in_bin, lane);
    pair_sync(pc.bar);  // both warps have read the histogram
    *reinterpret_cast<uint4*>(rw.hist + j_lane) = make_uint4(0u, 0u, 0u, 0u);
    dist = c > k && sel < 255u && in_bin <= static_cast<uint32_t>(kScratch);
    if (dist) {  // the lower pieces' counts above and in the bin, and this piece's
      uint32_t ph = 0, pe = 0, mh = 0, mq = 0;
#pragma unroll 1
      for (int i0 = 0; i0 <= me; i0 += kB) {
        uint4 h[kB];
#pragma unroll
        for (int u = 0; u < kB; ++u) {
          const int i = i0 + u;
          h[u] = i <= me ? __ldcg(reinterpret_cast<const uint4*>(fused_v3_hist<Cfg>(p, c0 + i, i == 0 ? slot0 : 0, 1, r) +
                                                                  j_lane))
                         : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < kB; ++u) {
          const uint32_t v[4] = {h[u].x, h[u].y, h[u].z, h[u].w};
          uint32_t hi = 0, eq = 0;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            hi += j_lane + e > sel ? v[e] : 0u;
            eq += j_lane + e == sel ? v[e] : 0u;
          }
          if (i0 + u < me) {
            ph += hi;
            pe += eq;
          } else if (i0 + u == me) {
            mh += hi;
            mq += eq;
          }
        }
      }
      ph = __reduce_add_sync(0xffffffffu, ph);
      pe = __reduce_add_sync(0xffffffffu, pe);
      mh = __reduce_add_sync(0xffffffffu, mh);
      mq = __reduce_add_sync(0xffffffffu, mq);
      const uint4 o = pair_exchange(pc, make_uint4(ph, pe, mh, mq), lane);
      pre_hi = ph + o.x;
      pre_eq = pe + o.y;
      my_hi = mh + o.z;
      my_eq = mq + o.w;
    }
  }
  bool bad = false;
  if (dist) {  // this piece's entries: above the bin to the output, in it to the block's bin scratch
    int start;
    (void)row_length(p, row, &start);
    int* orow = p.out + size_t(row) * k;
    uint32_t* bk = fused_v3_hist<Cfg>(p, c0, slot0, 0, r);  // (piece 0's sample bins: the bin's keys)
    uint32_t* bi = fused_v3_hist<Cfg>(p, c0 + 1, 0, 0, r);  // (piece 1's: their indices)
    const uint32_t M = hsmax;
    const BinBounds bb = bin_bounds(gk, M - gk, range_mult(M - gk), sel, true);
    const PieceSegs own = fused_v3_piece_segs<Cfg>(p, blockIdx.x, reg, 1, r, kg, false);
    bad = !pair_emit_binned(
        own, pc, bb, pre_hi, my_hi, pre_eq, my_eq, lane,
        [&](uint32_t at, uint32_t idx, uint32_t) { orow[at] = static_cast<int>(idx) - start; },
        [&](uint32_t at, uint32_t idx, uint32_t key) {
          __stcg(bk + at, key);
          __stcg(bi + at, idx);
        });
  }
  if (kg == 0 && lane == 0) vsh[4 + r] = bad ? 1 : 0;
  __threadfence();
  ptx::named_barrier_sync(5 + rg, 256);
  if ((tid & 255) == 0) {
    int nbad = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) nbad += vsh[4 + 4 * rg + i];
    const int v = atomicAdd(ctr2, 1 + (nbad ? 0x10000 : 0));
    const bool last2 = (v & 0xffff) == 2 * np - 1;
    vsh[rg] = last2 ? 1 + (((v >> 16) + nbad) != 0 ? 2 : 0) : 0;
    __threadfence();
  }
  ptx::named_barrier_sync(5 + rg, 256);
  const int l2 = vsh[rg];
  if (l2 == 0) return 0;  // another piece finishes the block
  if (row >= p.rows || !((active >> r) & 1u)) return 0;
  if (!dist || (l2 & 2)) return 1;  // the merge over every piece (it rewrites the whole row)
  // The last piece: the bin's in_bin entries (every piece's, in piece order) ranked in shared memory;
  // the winners follow the `above` entries (the first warp; the second only loads).
  const uint32_t* bk = fused_v3_hist<Cfg>(p, c0, slot0, 0, r);
  const uint32_t* bi = fused_v3_hist<Cfg>(p, c0 + 1, 0, 0, r);
  uint32_t gmin = 0xffffffffu, gmax = 0;
  for (uint32_t j0 = 0; j0 < in_bin; j0 += 64) {  // (a warp-uniform loop)
    const uint32_t j = j0 + static_cast<uint32_t>(kg * 32 + lane);
    if (j < in_bin) {
      const uint32_t key = __ldcg(bk + j);
      rw.sk[j] = key;
      rw.si[j] = __ldcg(bi + j);
      gmin = min(gmin, key);
      gmax = max(gmax, key);
    }
  }
  gmin = __reduce_min_sync(0xffffffffu, gmin);
  gmax = __reduce_max_sync(0xffffffffu, gmax);
  const uint4 q = pair_exchange(pc, make_uint4(gmin, gmax, 0u, 0u), lane);  // (also: the scratch is complete)
  if (kg != 0) return 0;
  int start;
  (void)row_length(p, row, &start);
  int* orow = p.out + size_t(row) * k;
  const uint64_t t = finish_in_scratch(rw.sk, rw.si, in_bin, min(gmin, q.x), max(gmax, q.y), k - above, rw.hist, lane);
  const uint32_t lt = (1u << lane) - 1u;
  uint32_t pos = above;
  for (uint32_t j0 = 0; j0 < in_bin; j0 += 32) {
    const uint32_t j = j0 + static_cast<uint32_t>(lane);
    const bool keep = j < in_bin && composite(rw.sk[j], rw.si[j]) >= t;
    const uint32_t m = __ballot_sync(0xffffffffu, keep);
    const uint32_t at = pos + __popc(m & lt);
    if (keep && at < k) orow[at] = static_cast<int>(rw.si[j]) - start;
    pos += __popc(m);
  }
  __syncwarp();
  return 0;
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
  fused_v3_mark<Cfg>(p, 7, 8);
  if (lane < 4) __stcg(rec + (4 * rg + lane) * 32 + kRecFinal + kg * 4 + ((tid >> 5) & 3), cnt);
  ptx::named_barrier_sync(5 + rg, 256);
  // kSplitHist bit 1: every piece counts its own candidates of a gated row in
  // the fast bins of [gate, the union's largest sample key] and publishes
  // them before it counts itself done; hsmax, that key (0: no bins, the
  // general select). The same in every piece (the same published records).
  uint32_t hsmax = 0;
  if constexpr ((Cfg::kSplitHist & 1) != 0) {
    if (np > 1) {
      hsmax = fused_v3_publish_final_bins<Cfg>(pp, reg, c0, slot0, np);
      // Every pair's bins are stored (and fenced) before the row group's
      // thread 0 counts the piece done below. (Without this barrier, session
      // 19's race: the block's last piece could sum bins another piece had
      // not yet stored, its pass then disagreed with them and the row went
      // to one warp's select: the same set in another order, now and then.)
      ptx::named_barrier_sync(5 + rg, 256);
    }
  }
  fused_v3_mark<Cfg>(p, 7, 9);
  if (np > 1) {  // (one piece, or a redo: this CTA has every candidate)
    if constexpr ((Cfg::kSplitHist & 16) != 0) {  // the merge by every piece, where it applies
      const int dm = fused_v3_split_dist<Cfg>(pp, reg, b, c0, slot0, np, hsmax, active & 0xffu, (active >> 31) != 0u);
      if (__shfl_sync(0xffffffffu, dm, 0) == 0) return true;  // (said warp-uniform)
    } else {
      if ((tid & 255) == 0) {
        fused_v3_fence<Cfg>();
        const int done = atomicAdd(fused_v3_ctr(p, c0, slot0) + 2 + rg, 1);
        last[rg] = done == np - 1;
        fused_v3_fence<Cfg>();
      }
      ptx::named_barrier_sync(5 + rg, 256);
      if (!last[rg]) return true;
    }
  }
  fused_v3_mark<Cfg>(p, 7, 10);
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
  int res;
  if constexpr ((Cfg::kSplitHist & 8) != 0) {  // (dev, probe 6: dependent loads before the merge, words 2 / 3)
    if (p.probe == 6 && kg == 0 && lane == 0 && hsmax != 0u) {
      const uint32_t zero = static_cast<uint32_t>(clock64() >> 62);
      uint32_t v = 0;
      const long long t0 = clock64();
#pragma unroll 1
      for (int i = 0; i < 16; ++i) v = __ldcg(fused_v3_hist<Cfg>(p, c0 + (i % np), i % np == 0 ? slot0 : 0, 1, r) + (v & zero));
      const long long t1 = clock64();
      atomicAdd(rw.stats + 2, static_cast<unsigned long long>(t1 - t0) + (v & zero));
      atomicAdd(rw.stats + 3, 16ull);
    }
  }
  if constexpr ((Cfg::kSplitHist & 8) != 0) {  // (dev variant 67, probe 7: clock marks in the merge, words 1-6)
    const bool timed = p.probe == 7 && lane == 0 && kg == 0 && hsmax != 0u;
    const long long m0 = clock64();
    if (hsmax != 0u) fused_v3_sum_final_bins<Cfg>(pp, c0, slot0, np);
    const long long m1 = clock64();
    long long tk[4] = {m1, m1, m1, m1};
    auto mark = [&](int i) {
      if (timed) tk[i] = clock64();
    };
    res = pair_finish_row_prebinned(ps, pc, thr, hsmax, k, need, gk != 0, start, rw.hist, rw.sk, rw.si, lane, &cands,
                                    out, mark);
    if (timed) {
      const long long m2 = clock64();
      atomicAdd(rw.stats + 1, static_cast<unsigned long long>(m1 - m0));
      atomicAdd(rw.stats + 2, static_cast<unsigned long long>(tk[0] - m1));
      atomicAdd(rw.stats + 3, static_cast<unsigned long long>(tk[1] - tk[0]));
      atomicAdd(rw.stats + 4, static_cast<unsigned long long>(tk[2] - tk[1]));
      atomicAdd(rw.stats + 5, static_cast<unsigned long long>(m2 - tk[2]));
      atomicAdd(rw.stats + 6, 1ull);
    }
  } else if constexpr ((Cfg::kSplitHist & 1) != 0) {  // the pieces' bins summed, then one pass (hsmax 0: the general select)
    if (hsmax != 0u) fused_v3_sum_final_bins<Cfg>(pp, c0, slot0, np);
    res = pair_finish_row_prebinned(ps, pc, thr, hsmax, k, need, gk != 0, start, rw.hist, rw.sk, rw.si, lane, &cands,
                                    out);
  } else {
    res = pair_finish_row(ps, pc, thr, k, need, gk != 0, start, rw.hist, rw.sk, rw.si, lane, &cands, out);
  }
  fused_v3_mark<Cfg>(p, 7, 11);
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

// The block-end select of block row `row` (one warp; the caller checks that
// the row is active and in range): the exact top-k over its NS segments from
// seg0 (counts cnt[0 .. NS), threshold thr) written to the output; false when
// a gated row has fewer than min(k, n) candidates (the block is redone). Counts
// the candidates and selects (probe 2).
template <class Cfg>
__device__ __forceinline__ bool fused_v3_finish_row(const Sm90FusedParams& p, const uint32_t* seg0, const uint32_t* cnt,
                                                    uint64_t thr, bool gated, int row, uint32_t* hist, uint32_t* sk,
                                                    uint32_t* si, unsigned long long* stats, int lane) {
  using namespace fused_detail;
  const uint32_t seg_stride = 2u * static_cast<uint32_t>(p.cap);
  const SegLanes sl = make_seg_lanes(seg0, seg_stride, static_cast<uint32_t>(p.cap), cnt, Cfg::kSegs, lane);
  int start;
  const int n = row_length(p, row, &start);
  const uint32_t k = static_cast<uint32_t>(p.topk);
  const uint32_t need = min(k, static_cast<uint32_t>(n));
  int* orow = p.out + size_t(row) * k;
  uint32_t cands = 0;
  const bool ok = warp_finish_row<true>(sl, thr, k, need, gated, start, hist, sk, si, lane, &cands,
                                        [&](int at, int v, uint32_t) { orow[at] = v; });
  if (p.probe == 2 && lane == 0) {
    atomicAdd(stats + 4, static_cast<unsigned long long>(cands));
    atomicAdd(stats + 13, 1ull);
    if (!ok) atomicAdd(stats + 8, 1ull);
  }
  return ok;
}

// kAsyncSelect: the block-end selects on the producer warpgroup's three spare
// warps (kProducerRegs registers each: 32, or 64 with kMathRegs = 104). The math warps hand a block over (its candidate
// set cs = qi & 1: final segment counts, gate flags, thresholds in shared
// memory, then sel_full[cs], one arrival per math warp) and scan the next
// block into the other set; warp sw selects rows sw, sw + 3, sw + 6 with the
// same warp_finish_row as the synchronous block end, the three queue the
// block's unsafe rows for a redo, report both halves of the block and free the
// set (sel_empty[cs], waited on by the math warps before they reuse it).
// A handed-over block b < 0 ends the loop.
template <class Cfg>
__device__ __forceinline__ void fused_v3_select_loop(const Sm90FusedParams& p, uint8_t* smem) {
  using namespace fused_detail;
  constexpr int NS = Cfg::kSegs;
  constexpr int S = Cfg::kNumStages;
  const int lane = threadIdx.x & 31;
  const int sw = (static_cast<int>(threadIdx.x) - Cfg::kMathThreads) / 32 - 1;  // 0 .. kSelWarps - 1
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Cfg::kOffBars);
  uint64_t* sel_full = bars + 2 * S + 4;
  uint64_t* sel_empty = sel_full + 2;
  uint32_t* hist = reinterpret_cast<uint32_t*>(smem + Cfg::kOffSelHist) + sw * Cfg::kSelWords;
  uint32_t* sk = hist + 256;
  uint32_t* si = sk + kScratch;
  const volatile int* info = reinterpret_cast<const volatile int*>(smem + Cfg::kOffSelInfo);  // [set][4]
  const uint32_t* fin_all = reinterpret_cast<const uint32_t*>(smem + Cfg::kOffFinCnt);      // [set][row][seg]
  const volatile uint32_t* gated = reinterpret_cast<const volatile uint32_t*>(smem + Cfg::kOffGated);  // [set][row]
  uint32_t* sel_redo = reinterpret_cast<uint32_t*>(smem + Cfg::kOffSelRedo);                 // [set]
  unsigned long long* thr_all = reinterpret_cast<unsigned long long*>(smem + Cfg::kOffThr);  // [set][row]
  FusedV3Ctl* ctl = reinterpret_cast<FusedV3Ctl*>(smem + Cfg::kOffCtl);
  unsigned long long* stats = reinterpret_cast<unsigned long long*>(p.counter) + 1;
  const size_t set_words = size_t(8) * NS * 2 * size_t(p.cap);
  const uint32_t seg_stride = 2u * static_cast<uint32_t>(p.cap);
#pragma unroll 1
  for (int qi = 0;; ++qi) {
    const int cs = qi & 1;
    ptx::mbar_wait(sel_full + cs, (qi >> 1) & 1);
    const int b = info[cs * 4 + 0];
    if (b < 0) return;
    const uint32_t active = static_cast<uint32_t>(info[cs * 4 + 1]);
    const uint32_t* ws_set = p.ws + (size_t(blockIdx.x) * Cfg::kSets + cs) * set_words;
    uint32_t redo = 0;
#pragma unroll 1
    for (int r = sw; r < 8; r += Cfg::kSelWarps) {
      const long long t_sel = clock64();
      const int row = b * 8 + r;
      bool ok = true;
      if (((active >> r) & 1u) && row < p.rows) {
        ok = fused_v3_finish_row<Cfg>(p, ws_set + size_t(r * NS) * seg_stride, fin_all + (cs * 8 + r) * NS,
                                      thr_all[cs * 8 + r], gated[cs * 8 + r] != 0, row, hist, sk, si, stats, lane);
        if (p.probe == 2 && lane == 0) atomicAdd(stats + 5, static_cast<unsigned long long>(clock64() - t_sel));
      }
      __syncwarp();
      if (lane == 0) thr_all[cs * 8 + r] = 0;
      if (!ok) redo |= 1u << r;
    }
    if (lane == 0 && redo) atomicOr(sel_redo + cs, redo);
    __threadfence_block();
    ptx::named_barrier_sync(7, 32 * Cfg::kSelWarps);  // the block's 8 selects are done
    if (sw == 0 && lane == 0) {
      volatile uint32_t* rr = sel_redo + cs;
      const uint32_t mask = *rr;
      *rr = 0;
      fused_v3_half_finished(ctl, b, mask, 2);  // both halves of the block
      ptx::mbar_arrive(sel_empty + cs);
    }
  }
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
  fused_v3_mark<Cfg>(p, qi, 1);
  if (vis_u(0) == kVisitSample) {  // publish the piece's sample; its rest visit comes later
    if (vis_u(2) != vis_u(7)) {  // its last MMA was not the piece's last tile: release the Q buffer now
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(q_empty + qb);
    }
    fused_v3_split_sample_end<Cfg>(pp, vis_u(3), vis_u(4), vis_u(5), vis_u(2), cnt, b, vis_u(6));
  } else {  // a rest visit: publish; the block's last piece selects its rows
    // (kSplitHist bit 16: a waiter is the CTA's last share visit: its last split
    // piece, or its first when the share ends inside that block)
    const int reg = vis_u(3);
    const bool waiter = (Cfg::kSplitHist & 16) != 0 &&
                        (reg == 1 || (reg == 0 && static_cast<long long>(vis_u(7)) ==
                                                      reinterpret_cast<const FusedV3Shr*>(smem + Cfg::kOffShr)->sh_count));
    const bool ok = fused_v3_split_end_call<Cfg>(pp, reg, b, vis_u(4), vis_u(5), vis_u(6), cnt,
                                                 static_cast<uint32_t>(vis_u(8)) | (waiter ? 0x80000000u : 0u));
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
  fused_v3_mark<Cfg>(p, qi, 2);
  fused_v3_prestart<Cfg>(pp, qi + 1);
  fused_v3_mark<Cfg>(p, qi, 3);
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

// kAlignPieces (kSplitHist bit 512, session 21): this CTA's piece where the
// shares follow the blocks (split_align_pieces: B <= gp / 2 blocks of about
// equal length, each cut into m equal pieces on m B CTAs; CTA c holds piece
// c mod m of block c / m) replaces fused_split_share's equal share in shr
// (sh_b0, sh_t0, sh_count; no share for a CTA past m B) and shr->sh_m = m;
// else sh_m = 0 and the equal share stands. Collective over the producer
// warpgroup's second warp (a checker warp), after fused_split_share
// (shr->sh_gp, nblocks: its); each lane spans blocks lane, lane + 32, ... (at
// most 66 on 132 SMs); then ctl->share_ready (zeroed at the kernel's start),
// which the producer thread waits for before it reads shr. Not inlined, not
// run by every thread (fused_split_share's kAlign), nor by the producer
// thread's warp: each of those cost the split kernel's tile loops 2-7
// instructions (ptxas's allocation of the whole kernel); here 2 moves.
template <class Cfg>
__device__ __noinline__ void fused_v3_align_piece(const Sm90FusedParams* pp, FusedV3Shr* shr, FusedV3Ctl* ctl,
                                                  int nblocks) {
  const Sm90FusedParams& p = *pp;
  const int lane = threadIdx.x & 31;
  const int gp = shr->sh_gp;
  long long m = 0;
  if (nblocks > 0 && 2 * static_cast<long long>(nblocks) <= gp) {
    const Sm90LogitsParams lp{p.starts, p.ends, nullptr, 0, p.rows, p.keys};
    long long total = 0;
    int tmin = 0x7fffffff, tmax = 0;
    for (int b = lane; b < nblocks; b += 32) {
      int lo, hi;
      const int n = block_span<Cfg::kBlockRows, Cfg::kBlockKeys>(lp, b, lo, hi);
      total += n;
      tmin = min(tmin, n);
      tmax = max(tmax, n);
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
      total += __shfl_xor_sync(0xffffffffu, total, d);
      tmin = min(tmin, __shfl_xor_sync(0xffffffffu, tmin, d));
      tmax = max(tmax, __shfl_xor_sync(0xffffffffu, tmax, d));
    }
    m = split_align_pieces(nblocks, gp, total, tmin, tmax);
    const long long c = blockIdx.x;
    if (m > 0 && lane == 0) {
      if (c < m * nblocks) {
        const int b = static_cast<int>(c / m), i = static_cast<int>(c % m);
        int lo, hi;
        const long long n = block_span<Cfg::kBlockRows, Cfg::kBlockKeys>(lp, b, lo, hi);
        shr->sh_b0 = b;
        shr->sh_t0 = static_cast<int>(n * i / m);
        shr->sh_count = n * (i + 1) / m - n * i / m;
      } else {
        shr->sh_b0 = -1;
        shr->sh_count = 0;
      }
    }
  }
  if (lane == 0) {
    shr->sh_m = static_cast<int>(m);
    __threadfence_block();
    reinterpret_cast<volatile int*>(ctl)[offsetof(FusedV3Ctl, share_ready) / 4] = 1;
  }
  __syncwarp();
}

// kQPerm's tile epilogue is logits_reduce_perm (sm90_fp8_mqa_logits_v2.cuh),
// the dense kernel's for blocks in the permuted Q layout; kQPerm & 16's MMA
// chain is logits_mma_issue_dab.

// kQPerm & 8: a tile's MMA chain (logits_tile_mma_issue_lo) with the four B
// descriptors given as 64-bit values.
__device__ __forceinline__ void fused_v3_mma_issue_db(float (&acc)[64], uint32_t a_lo, const uint64_t (&db)[4]) {
  constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint64_t da;
    asm("mov.b64 %0, {%1, %2};" : "=l"(da) : "r"(a_lo + 2 * kk), "r"(kDescHi));
    ptx::wgmma_e4m3<128>(acc, da, db[kk], kk);
  }
  ptx::wgmma_commit();
  ptx::fence_regs(acc);
}

// kEarlyWeights: a lane's 16 weight pairs (its row group's row r, head group
// jj: byte offset (16 r + 4 jj) * 8 from a), as volatile shared loads with
// immediate offsets, so that they stay where they are issued: between the
// MMAs' issue and their wait.
template <int kOff>
__device__ __forceinline__ float2 fused_v3_lds_f2(uint32_t a) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2+%3];" : "=f"(v.x), "=f"(v.y) : "r"(a), "n"(kOff));
  return v;
}
template <int... I>
__device__ __forceinline__ void fused_v3_weights_early(float2 (&w)[4][4], uint32_t a, std::integer_sequence<int, I...>) {
  ((w[I / 4][I % 4] = fused_v3_lds_f2<((I / 4) * 16 + (I % 4) * 4) * 8>(a)), ...);
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
  uint64_t* q_empty = bars + 2 * S + (Cfg::kSplitRG ? 4 : 2);  // (kSplitRG: [rg][2] each)
  uint32_t* hist_all = reinterpret_cast<uint32_t*>(smem + Cfg::kOffHist);
  uint32_t* scratch_all = reinterpret_cast<uint32_t*>(smem + Cfg::kOffScratch);
  uint32_t* segcnt_all = reinterpret_cast<uint32_t*>(smem + Cfg::kOffSegCnt);
  unsigned long long* thr_all = reinterpret_cast<unsigned long long*>(smem + Cfg::kOffThr);
  volatile int* slot = reinterpret_cast<volatile int*>(smem + Cfg::kOffSlot);  // [2][kSlotInts]
  constexpr int SI = Cfg::kSlotInts;
  uint32_t* redo_rg = reinterpret_cast<uint32_t*>(smem + Cfg::kOffRedo);       // [set][rg]: rows found unsafe
  FusedV3Ctl* ctl = reinterpret_cast<FusedV3Ctl*>(smem + Cfg::kOffCtl);
  volatile FusedV3Ctl* ctl_v = ctl;

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int lane = tid & 31;
  // kAsyncSelect: a block handed to the selector warps (sel_full[set], one
  // arrival per math warp) and its set free again (sel_empty[set]).
  uint64_t* sel_full = bars + 2 * S + 4;
  uint64_t* sel_empty = sel_full + 2;
  volatile int* sel_info = reinterpret_cast<volatile int*>(smem + Cfg::kOffSelInfo);  // [set][4]
  if (tid == 0) {
    if constexpr (Cfg::kSplitRG) {  // two rings, each consumed by its row group's 8 warps
      init_pipeline_barriers<S, Cfg::kMathThreads / 64>(full, empty, q_full, q_empty);
      init_pipeline_barriers<0, Cfg::kMathThreads / 64>(full, empty, q_full + 2, q_empty + 2);
    } else {
      init_pipeline_barriers<S, Cfg::kMathThreads / 32>(full, empty, q_full, q_empty);
    }
    if constexpr (Cfg::kAsyncSelect) {
      for (int i = 0; i < 2; ++i) {
        ptx::mbar_init(sel_full + i, Cfg::kMathThreads / 32);
        ptx::mbar_init(sel_empty + i, 1);
      }
      ptx::fence_barrier_init();
    }
  }
  if constexpr (Cfg::kAsyncSelect)
    if (tid < 2) reinterpret_cast<uint32_t*>(smem + Cfg::kOffSelRedo)[tid] = 0;
  for (int i = tid; i < 8 * 256; i += Cfg::kThreads) hist_all[i] = 0;
  if constexpr (Cfg::kAsyncSelect)  // the selector warps' histograms start cleared (each select clears its own)
    for (int i = tid; i < Cfg::kSelWarps * Cfg::kSelWords; i += Cfg::kThreads)
      reinterpret_cast<uint32_t*>(smem + Cfg::kOffSelHist)[i] = 0;
  for (int i = tid; i < Cfg::kSets * 8; i += Cfg::kThreads) thr_all[i] = 0;
  if (tid < 4) redo_rg[tid] = 0;
  if constexpr (Cfg::kGateRange)
    if (tid < 8) reinterpret_cast<uint32_t*>(smem + Cfg::kOffSmax)[tid] = 0;
  for (int i = tid; i < static_cast<int>(sizeof(FusedV3Ctl) / 4); i += Cfg::kThreads)
    reinterpret_cast<uint32_t*>(ctl)[i] = 0;
  FusedV3Rq* rq1 = reinterpret_cast<FusedV3Rq*>(smem + Cfg::kOffRq1);  // (kSplitRG: row group 1's redo queue)
  if constexpr (Cfg::kSplitRG)
    for (int i = tid; i < static_cast<int>(sizeof(FusedV3Rq) / 4); i += Cfg::kThreads)
      reinterpret_cast<uint32_t*>(rq1)[i] = 0;
  __syncthreads();

  const int nblocks = (p.rows + R - 1) / R;
  const int k = p.topk;
  const size_t set_words = size_t(8) * NS * 2 * size_t(p.cap);
  unsigned long long* stats = reinterpret_cast<unsigned long long*>(p.counter) + 1;
  if constexpr (Cfg::kShares) {  // this CTA's share of the call's tiles (every thread; synchronises the CTA)
    const Sm90LogitsParams lp{p.starts, p.ends, nullptr, 0, p.rows, p.keys};
    fused_split_share<Cfg::kThreads>(lp, reinterpret_cast<FusedV3Shr*>(smem + Cfg::kOffShr),
                                     Cfg::kHybrid ? fused_v3_share_blocks(nblocks, gridDim.x, p.share_rule) : nblocks,
                                     gridDim.x,
                                     Cfg::kHybrid && p.share_rule > 0 && nblocks > static_cast<int>(gridDim.x)
                                         ? p.share_rule
                                         : kShareMinTiles);
  }

  if (wg == Cfg::kMathWarpgroups) {
    // ---------------- producer warpgroup ----------------
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    // (kSplitRG: lane 0 of producer warps 0 and 1, one per row group)
    if (Cfg::kSplitRG ? !(lane == 0 && tid < Cfg::kMathThreads + 64) : tid != Cfg::kMathThreads) {
      // The producer warpgroup's other threads check the row ranges (range_check.cuh) and leave.
      constexpr int kCheckLo = Cfg::kMathThreads + (Cfg::kSplitRG ? 64 : 32);
      constexpr int kCheckers = Cfg::kThreads - kCheckLo;
      // (kAlignPieces: the producer warpgroup's second warp first gives the
      // producer thread its piece, fused_v3_align_piece)
      if constexpr (Cfg::kAlignPieces)
        if (tid >= Cfg::kMathThreads + 32 && tid < Cfg::kMathThreads + 64)
          fused_v3_align_piece<Cfg>(&p, reinterpret_cast<FusedV3Shr*>(smem + Cfg::kOffShr), ctl,
                                    Cfg::kHybrid ? fused_v3_share_blocks(nblocks, gridDim.x, p.share_rule) : nblocks);
      check_row_ranges(p.err, p.starts, p.ends, p.rows, p.keys, kKernelFused,
                       range_checker_index(tid, kCheckLo, kCheckers), gridDim.x * kCheckers);
      if constexpr (Cfg::kAsyncSelect)
        if (tid >= kCheckLo) fused_v3_select_loop<Cfg>(p, smem);
      return;
    }
    ptx::prefetch_tensor_map(&tm_q);
    ptx::prefetch_tensor_map(&tm_k);
    ptx::prefetch_tensor_map(&tm_scales);
    ptx::prefetch_tensor_map(&tm_weights);
    if constexpr (Cfg::kShares) {
      // ---- kShares: the visits of this CTA's share (see "v3 shares") ----
      const FusedV3Shr* shr = reinterpret_cast<const FusedV3Shr*>(smem + Cfg::kOffShr);
      const Sm90LogitsParams lp{p.starts, p.ends, nullptr, 0, p.rows, p.keys};
      int it = 0, qi = 0, issued = 0, head = 0;
      // kQPerm: the block whose Q and weights each buffer holds (-1: none). A
      // visit of the block a buffer still holds (a split piece's rest visit
      // after its sample visit two visits earlier) skips the 128 two-row box
      // loads: only the TMA writes these buffers.
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
        if (Cfg::kQPerm != 0 && qheld[qb] == b) {
          ptx::mbar_arrive(q_full + qb);  // (the buffer still holds block b's Q and weights)
        } else {
          ptx::mbar_arrive_expect_tx(q_full + qb, Cfg::kQTileBytes + Cfg::kWeightBytes);
          if constexpr (Cfg::kQPerm != 0) {  // (the permuted rows, as the whole-block producer loads them)
            uint8_t* qdst = smem + Cfg::kOffQ + qb * Cfg::kQTileBytes;
#pragma unroll 1
            for (int n = 0; n < 256; n += 2) {
              const int sl2 = (n >> 5) & 3, q = (n >> 1) & 3;
              ptx::tma_load_2d(qdst + n * 128, &tm_q, q_full + qb, 0, b * R * 32 + (n & 128) + 32 * (sl2 ^ q) + (n & 31));
            }
            qheld[qb] = b;
          } else {
            ptx::tma_load_2d(smem + Cfg::kOffQ + qb * Cfg::kQTileBytes, &tm_q, q_full + qb, 0, b * R * 32);
          }
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
      // as the unshared kernel runs it.
      auto whole = [&](int b, int n, uint32_t active, bool redo) {
        if (Cfg::kWholePieces && !redo && n > 0) {  // (variant 34: a sample visit and a rest visit, one piece)
          int ns = fused_sample_tiles(n, k, p.target);
          ns = ns > Cfg::kSplitSampleTiles ? Cfg::kSplitSampleTiles : ns;
          visit(b, 0, n, ns, 0xffu, kVisitSample, 0, ns, 2, blockIdx.x, 2, 1);
          visit(b, 0, n, ns, 0xffu, kVisitRest, ns, n, 2, blockIdx.x, 2, 1);
        } else {
          visit(b, 0, n, redo ? 0 : fused_sample_tiles(n, k, p.target), active, kVisitWhole, 0, n, 2, 0, 0, 1);
        }
        ++issued;
      };
      if constexpr (Cfg::kAlignPieces) {  // (the second warp's fused_v3_align_piece: its share)
        while (reinterpret_cast<volatile int*>(ctl)[offsetof(FusedV3Ctl, share_ready) / 4] == 0) {
        }
        __threadfence_block();
      }
      const long long total = shr->sh_total, g0 = shr->sh_g0, count = shr->sh_count;
      const int gp = shr->sh_gp;
      if (shr->sh_b0 >= 0 && count > 0) {
        // Split pieces: the block's first CTA c0 (owner of its first tile G),
        // the slot it keeps the block in (0: the block opens c0's share), its
        // pieces; sample tiles in proportion to the piece (at least one, at
        // most kSplitSampleTiles).
        // Aligned pieces (sh_m = m > 0, fused_v3_align_piece): CTA c holds
        // piece c mod m of block c / m, so the block's pieces are CTAs
        // [c - c mod m, +m), each at its slot 0 (every piece opens its CTA's
        // share, which is that one piece).
        const int am = Cfg::kAlignPieces ? shr->sh_m : 0;  // (read after the wait above)
        const int ac0 = am > 0 ? static_cast<int>(blockIdx.x) / am * am : 0;
        auto c0_of = [&](long long G) { return am > 0 ? ac0 : split_owner(G, total, gp); };
        auto slot0_of = [&](long long G) { return am > 0 ? 0 : total * c0_of(G) / gp == G ? 0 : 1; };
        auto pieces_of = [&](long long G, int ntb) {
          return am > 0 ? am : split_owner(G + ntb - 1, total, gp) - c0_of(G) + 1;
        };
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
      // kHybrid: the blocks past the shares, whole, from the block counter
      // (largest first; a block is claimed only once its Q buffer is free).
      const int nshare = Cfg::kHybrid ? fused_v3_share_blocks(nblocks, gridDim.x, p.share_rule) : nblocks;
      if constexpr (Cfg::kHybrid) {
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
    // ---- whole blocks from the block counter: one stream per producer warp,
    // the 8-row blocks of both row groups, or (kSplitRG) row group prg's own
    // 4-row blocks with its ring (kRingStages stages), its halves of the Q /
    // weight buffers, its slots and its redo queue ----
    const int prg = Cfg::kSplitRG ? (tid - Cfg::kMathThreads) >> 5 : 0;
    constexpr int SR = Cfg::kRingStages;
    constexpr int RB = Cfg::kRowsPerBlock;
    constexpr int kReports = Cfg::kSplitRG ? 1 : 2;  // row-group halves that report a block
    uint64_t* r_full = full + prg * SR;
    uint64_t* r_empty = empty + prg * SR;
    uint64_t* rq_full = q_full + 2 * prg;
    uint64_t* rq_empty = q_empty + 2 * prg;
    volatile int* rslot = slot + 2 * SI * prg;
    volatile FusedV3Rq* rq1_v = rq1;
    const bool own_q1 = Cfg::kSplitRG && prg == 1;  // (kSplitRG: row group 1's redo queue is rq1)
    const int nb = (p.rows + RB - 1) / RB;
    int it = 0, issued = 0, head = 0;
    const Sm90LogitsParams lp{p.starts, p.ends, nullptr, 0, p.rows, p.keys};
    auto pop_redo = [&](int& b, uint32_t& mask) {
      return own_q1 ? redo_queue_pop(rq1_v, head, b, mask, [](volatile FusedV3Rq*, int) {})
                    : redo_queue_pop(ctl_v, head, b, mask, [](volatile FusedV3Ctl*, int) {});
    };
    for (int qi = 0;; ++qi) {
      const int qb = qi & 1;
      ptx::mbar_wait(rq_empty + qb, ((qi >> 1) & 1) ^ 1);
      // Claim the next block only once its Q buffer is free (one block ahead).
      int b = -1;
      uint32_t active = 0xffu;  // (kSplitRG: the row group's rows are bits 4 prg.. of the CTA's 8 row slots)
      // A redo is a rescan with no gate (a gated redo of a block whose rows all
      // failed would fail again, forever).
      bool redo = pop_redo(b, active);
      bool have = redo;
      if (!have) {
        const int w = atomicAdd(p.counter, 1);
        if (w < nb) {
          b = nb - 1 - w;
          have = true;
        } else {
          // No new block: a block still in flight may yet need a redo (each
          // row group reports its half of a block).
          while ((own_q1 ? rq1_v->halves_done : ctl_v->halves_done) < kReports * issued) __nanosleep(256);
          redo = have = pop_redo(b, active);
        }
      }
      if (!have) {
        rslot[SI * qb] = -1;
        ptx::mbar_arrive(rq_full + qb);
        return;
      }
      ++issued;
      int lo, hi;
      const int nt = block_span<RB, Cfg::kBlockKeys>(lp, b, lo, hi);
      const int stride = tile_stride(nt);
      rslot[SI * qb + 0] = b;
      rslot[SI * qb + 1] = lo;
      rslot[SI * qb + 2] = nt;
      rslot[SI * qb + 3] = stride;
      rslot[SI * qb + 4] = !redo ? fused_sample_tiles(nt, k, p.target) : 0;
      rslot[SI * qb + 5] = static_cast<int>(active);
      if (nt == 0) {  // every row empty: the consumers only write -1
        ptx::mbar_arrive(rq_full + qb);
        continue;
      }
      // Q buffer qb and weight buffer qb (kSplitRG: the row group's halves).
      ptx::mbar_arrive_expect_tx(rq_full + qb, (Cfg::kQTileBytes + Cfg::kWeightBytes) / (3 - kReports));
      if constexpr (Cfg::kQPerm != 0) {
        // kQPerm: smem row 32 s + 8 jj + 2 q + e of row group g holds its Q row
        // (s ^ q, head 8 jj + 2 q + e): 64 boxes of two rows per row group.
        uint8_t* qdst = smem + Cfg::kOffQ + qb * Cfg::kQTileBytes;
#pragma unroll 1
        for (int n = 0; n < 256; n += 2) {
          const int sl = (n >> 5) & 3, q = (n >> 1) & 3;
          const int src = (n & 128) + 32 * (sl ^ q) + (n & 31);  // (n & 31) = 8 jj + 2 q
          ptx::tma_load_2d(qdst + n * 128, &tm_q, rq_full + qb, 0, b * RB * 32 + src);
        }
      } else {
        ptx::tma_load_2d(smem + Cfg::kOffQ + qb * Cfg::kQTileBytes + prg * (Cfg::kQTileBytes / 2), &tm_q,
                         rq_full + qb, 0, b * RB * 32);
      }
      ptx::tma_load_2d(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes + prg * (Cfg::kWeightBytes / 2),
                       &tm_weights, rq_full + qb, 0, b * RB);
      for (int t = 0, tp = nt - 1; t < nt; ++t, ++it, tp = next_tile(tp, nt, stride)) {
        const int st = it % SR;
        ptx::mbar_wait(r_empty + st, ((it / SR) & 1) ^ 1);
        const int stage = prg * SR + st;
        const int key0 = lo + tp * Cfg::kBlockKeys;
        // Development check (probe 4): the stage's first key, for the consumers to compare.
        if (p.probe == 4) reinterpret_cast<volatile int*>(p.counter)[16 + stage] = key0;
        ptx::mbar_arrive_expect_tx(r_full + st, Cfg::kKTileBytes + Cfg::kScaleBytes);
        ptx::tma_load_2d(smem + Cfg::kOffK + stage * Cfg::kKTileBytes, &tm_k, r_full + st, 0, key0);
        ptx::tma_load_2d(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, &tm_scales, r_full + st, key0, 0);
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
  const bool selector = kg == 0;             // warp warp_in_wg of the first warpgroup selects row 4 rg + warp_in_wg
  const int sel_row = 4 * rg + warp_in_wg;
  const int bar_rg = 5 + rg;                 // named barrier of the row group (8 warps)
  const uint32_t a_lo0 = desc_lo_k128_sw128(smem + Cfg::kOffK + kg * 64 * 128);
  const uint32_t b_lo0 = desc_lo_k128_sw128(smem + Cfg::kOffQ + rg * L::kN * 128);
  // words from one segment of a row to the next (kFixedTopk: a constant)
  const uint32_t seg_stride = 2u * static_cast<uint32_t>(Cfg::kFixedTopk ? Cfg::cap(Cfg::kFixedTopk) : p.cap);
  const int key_in_tile = kg * 64 + warp_in_wg * 16 + (lane >> 2);  // this lane's first key of a tile (and + 8)

  const long long t_start = clock64();
  fused_v3_mark<Cfg>(p, 0, 15);  // (dev configurations only)
  int it = 0;
  int st_i = 0;        // kLeanLoop: the next tile's stage in the ring, and its phase
  uint32_t st_ph = 0;
  for (int qi = 0;; ++qi) {
    if constexpr (Cfg::kShares) {
      // (warp-uniform by construction; said so, so that the stage and Q buffer
      // indices, hence the MMA descriptors, stay in uniform registers)
      qi = __shfl_sync(0xffffffffu, qi, 0);
      it = __shfl_sync(0xffffffffu, it, 0);
    }
    const int qb = qi & 1;
    const int qs = Cfg::kSplitRG ? 2 * rg + qb : qb;  // the Q buffer's slot and barriers (kSplitRG: the row group's)
    const int cs = Cfg::kSets == 2 ? qi & 1 : 0;
    ptx::mbar_wait(q_full + qs, (qi >> 1) & 1);
    const int b = slot[SI * qs];
    if constexpr (Cfg::kAsyncSelect) {
      // Set cs is free once the selects of the block that last used it are done.
      ptx::mbar_wait(sel_empty + cs, ((qi >> 1) & 1) ^ 1);
      if (b < 0) {  // tell the selector warps to end
        if (tid == 0) sel_info[cs * 4] = -1;
        __syncwarp();
        if (lane == 0) ptx::mbar_arrive(sel_full + cs);
      }
    }
    if (b < 0) {
      if (p.probe == 2 && lane == 0) atomicAdd(stats + 6, static_cast<unsigned long long>(clock64() - t_start));
      break;
    }
    const int nt = Cfg::kShares ? __shfl_sync(0xffffffffu, slot[SI * qs + 2], 0) : slot[SI * qs + 2];
    const int stride = Cfg::kShares ? __shfl_sync(0xffffffffu, slot[SI * qs + 3], 0) : slot[SI * qs + 3];
    // kShares: the visit's kind, its walk positions [t_begin, t_end) of the
    // piece's nt tiles, its candidate region and its split block (c0, slot0,
    // pieces); a rest visit has no sample tiles (its gate is the pieces').
    // (kShares: the fields the tile loops do not need are kept in this warp's
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
    const int reg0 = Cfg::kShares ? slot[SI * qs + 9] : cs;
    if constexpr (Cfg::kShares) {
      // kind, t_begin, t_end, reg, c0, slot0, pieces, the piece's tiles, active rows
      if (lane < 9) vis_of()[lane] = slot[SI * qs + (lane < 7 ? 6 + lane : lane == 7 ? 2 : 5)];
      __syncwarp();
    }
    const int ns = kind0 == kVisitRest ? 0 : Cfg::kShares ? __shfl_sync(0xffffffffu, slot[SI * qs + 4], 0) : slot[SI * qs + 4];
    // A rest visit starts with the pieces' shared gate and this piece's sample
    // entries at or above it, here, before the visit's loop state exists (a
    // call between the loops costs the tile loops their registers).
    // (the previous visit's end ran it: fused_v3_prestart; every shares
    // visit is preceded by one, the first of a CTA is never a rest visit)
    uint32_t rest_cnt = 0;
    if constexpr (Cfg::kShares)
      if (kind0 == kVisitRest) rest_cnt = reinterpret_cast<const volatile FusedV3Shr*>(smem + Cfg::kOffShr)->rest_cnt[tid >> 5][quad];
    // (The loops keep the whole block's bounds: a rest visit covers the walk
    // positions [t_begin, nt); a split sample's ns tiles end before nt (its Q
    // buffer is released after the loop unless ns == nt) and its compaction
    // check, if any, finds its tails far under the trigger.)
    const uint32_t active = static_cast<uint32_t>(slot[SI * qs + 5]);
    // Row r's segment s (of set cs): keys at word (r * NS + s) * seg_stride of
    // the set, indices + cap; this lane's own segment as a 32-bit word offset
    // from p.ws (registers are at their cap in the tile loop).
    const uint32_t set_off = Cfg::kShares ? static_cast<uint32_t>(fused_v3_set_off<Cfg>(p, reg0))
                                          : (blockIdx.x * Cfg::kSets + cs) * static_cast<uint32_t>(set_words);
    // (a split sample appends to the segment's tail)
    const uint32_t my_off = set_off + static_cast<uint32_t>(my_row * NS + seg) * seg_stride +
                            (Cfg::kShares && kind0 == kVisitSample ? static_cast<uint32_t>(p.cap - Cfg::kTail) : 0u);
    int pub = 0;  // segment-count publications of this block (compaction checks, gate, block end)
    auto segcnt_of = [&](int pb) { return segcnt_all + (cs * 2 + (pb & 1)) * 8 * NS; };  // [row][seg]
    unsigned long long* thr_s = thr_all + cs * 8;    // [row]

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
    float2 wreg[Cfg::kSmemWeights ? (Cfg::kRegWRows > 0 ? Cfg::kRegWRows : 1) : 4][4];
    // kSmemWeights: this lane's copy of its 32 weights (the 64 lanes of a (row
    // group, quad) write the same values to the same slot, and each reads back
    // only its own writes: no barrier).
    float4* wl = reinterpret_cast<float4*>(smem + Cfg::kOffWlA) + ((qb * 2 + rg) * 4 + quad) * 8;
    if (nt > 0) {
      const float2* w2 = reinterpret_cast<const float2*>(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes) + rg * 64;
      if constexpr (Cfg::kWeightsMode == 1 || Cfg::kWeightsMode == 3) {
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int jj = 0; jj < 4; jj += 2) {
            const int rr = Cfg::kQPerm ? r ^ quad : r;  // (kQPerm: slot r holds row r ^ quad)
            const float2 a = w2[rr * 16 + jj * 4 + quad], c = w2[rr * 16 + (jj + 1) * 4 + quad];
            wl[r * 2 + jj / 2] = make_float4(a.x, a.y, c.x, c.y);
          }
        if constexpr (Cfg::kWeightsMode == 3) {
          __syncwarp();
          ptx::named_barrier_sync(bar_rg, 256);
        }
      } else if constexpr (Cfg::kWeightsMode == 0) {
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) wreg[r][jj] = w2[r * 16 + jj * 4 + quad];
      } else if constexpr (Cfg::kRegWRows > 0) {
#pragma unroll
        for (int r = 0; r < Cfg::kRegWRows; ++r)
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) wreg[r][jj] = w2[r * 16 + jj * 4 + quad];
      }
    }

    // kQPerm & 2 (dev): the quad's lane mask and the lanes-below mask kept in
    // registers for the block (an opaque move each tile, so ptxas does not
    // rematerialize them from S2R), where the default recomputes both per tile.
    uint32_t qmask_k = 0x11111111u << quad, lt_k = ptx::lanemask_lt();
    // kQPerm & 4 (dev): this lane's weight rows (slot s: row s ^ quad) as four
    // shared addresses held for the block (loads at immediate offsets), where
    // ptxas otherwise rebuilds them from the Q buffer's index every tile.
    // kQPerm & 8 (dev): the block's four Q (B operand) descriptors, one per
    // k32 step, as 64-bit values held for the block.
    uint64_t db_k[4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      constexpr uint32_t kDescHi = (1024u >> 4) | (1u << 30);
      asm("mov.b64 %0, {%1, %2};" : "=l"(db_k[kk]) : "r"(b_lo0 + qb * (Cfg::kQTileBytes >> 4) + 2 * kk), "r"(kDescHi));
    }
    // kQPerm & 16 (dev): the four A descriptors' pairs held across tiles (each
    // tile writes their low words only).
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
    // tile's largest key per row (the gate's position cap). kLeanFilter: the
    // pass flags without short-circuits, 32-bit word offsets.
    auto tile_tail = [&](auto sample_tag, uint32_t k0, uint32_t k1, int ka, int t) {
      constexpr bool kSample = decltype(sample_tag)::value;
      const int kb = ka + 8;
      const bool in0 = static_cast<uint32_t>(ka - rs) < len, in1 = static_cast<uint32_t>(kb - rs) < len;
      const bool pass0 = Cfg::kLeanFilter ? in0 & (composite(k0, static_cast<uint32_t>(ka)) > thr)
                                          : in0 && composite(k0, static_cast<uint32_t>(ka)) > thr;
      const bool pass1 = Cfg::kLeanFilter ? in1 & (composite(k1, static_cast<uint32_t>(kb)) > thr)
                                          : in1 && composite(k1, static_cast<uint32_t>(kb)) > thr;
      if constexpr (kSample) {
        uint32_t mx = max(in0 ? k0 : 0u, in1 ? k1 : 0u);
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        if (lane < 4 && mx) atomicMax(&ctl->tile_max[4 * rg + lane][t], mx);
      }
      if constexpr ((Cfg::kQPerm & 2) != 0) asm volatile("mov.b32 %0, %0;\n\tmov.b32 %1, %1;" : "+r"(qmask_k), "+r"(lt_k));
      const uint32_t qmask = (Cfg::kQPerm & 2) != 0 ? qmask_k : 0x11111111u << quad;
      const uint32_t m0 = __ballot_sync(0xffffffffu, pass0) & qmask;
      const uint32_t m1 = __ballot_sync(0xffffffffu, pass1) & qmask;
      const uint32_t lt = (Cfg::kQPerm & 2) != 0 ? lt_k : ptx::lanemask_lt();
      const uint32_t n0 = __popc(m0);
      if constexpr (Cfg::kLeanFilter) {
        const uint32_t o = my_off + cnt;  // this lane's next slot: a word offset from p.ws
        if constexpr (Cfg::kFixedTopk != 0) {
          constexpr int kCapW = Cfg::cap(Cfg::kFixedTopk);
          const uint32_t at0 = o + __popc(m0 & lt), at1 = o + n0 + __popc(m1 & lt);
          ptx::st_cg_pair_if_off<kCapW>(pass0, p.ws + at0, k0, static_cast<uint32_t>(ka));
          ptx::st_cg_pair_if_off<kCapW>(pass1, p.ws + at1, k1, static_cast<uint32_t>(kb));
        } else if constexpr (Cfg::kPredStores) {
          const uint32_t at0 = o + __popc(m0 & lt), at1 = o + n0 + __popc(m1 & lt);
          ptx::st_cg_pair_if(pass0, p.ws + at0, p.ws + (at0 + static_cast<uint32_t>(p.cap)), k0, static_cast<uint32_t>(ka));
          ptx::st_cg_pair_if(pass1, p.ws + at1, p.ws + (at1 + static_cast<uint32_t>(p.cap)), k1, static_cast<uint32_t>(kb));
        } else {
          if (pass0) {
            const uint32_t at = o + __popc(m0 & lt);
            __stcg(p.ws + at, k0);
            __stcg(p.ws + (at + static_cast<uint32_t>(p.cap)), static_cast<uint32_t>(ka));
          }
          if (pass1) {
            const uint32_t at = o + n0 + __popc(m1 & lt);
            __stcg(p.ws + at, k1);
            __stcg(p.ws + (at + static_cast<uint32_t>(p.cap)), static_cast<uint32_t>(kb));
          }
        }
      } else {
        uint32_t* base = p.ws + my_off + cnt;
        if (pass0 && (kSample || !(Cfg::kTimingCut & 1))) {
          const uint32_t at = __popc(m0 & lt);
          __stcg(base + at, k0);
          __stcg(base + p.cap + at, static_cast<uint32_t>(ka));
        }
        if (pass1 && (kSample || !(Cfg::kTimingCut & 1))) {
          const uint32_t at = n0 + __popc(m1 & lt);
          __stcg(base + at, k1);
          __stcg(base + p.cap + at, static_cast<uint32_t>(kb));
        }
      }
      cnt += n0 + __popc(m1);
    };
    // kPipeTail: the tile whose tail is pending (its order keys and first key;
    // its walk position is the current tile's minus one).
    uint32_t pend_k0 = 0, pend_k1 = 0;
    int pend_ka = Cfg::kAlwaysTail ? rs - 16 : 0;  // (kAlwaysTail: nothing pending, both keys out of range)
    bool pend_ok = false;
    bool rel_next = false;  // kLazyCheck: the next stage release orders the published counts
    // kLazyCheck: the count slot of check j for row `row`, segment `sg`.
    auto ckc_at = [&](int j, int row, int sg) -> uint32_t& {
      return reinterpret_cast<uint32_t*>(smem + Cfg::kOffCkc)[((j & 1) * 8 + row) * NS + sg];
    };
    auto flush = [&](auto sample_tag, int t_next) {
      if constexpr (Cfg::kPipeTail) {
        if (Cfg::kAlwaysTail || pend_ok) tile_tail(sample_tag, pend_k0, pend_k1, pend_ka, t_next - 1);
        pend_ok = false;
        if constexpr (Cfg::kAlwaysTail) pend_ka = rs - 16;
      }
    };

    // One key tile: MMA, epilogue, filter, appends to this warp's segments.
    // kSample: also the tile's largest key per row (the gate's position cap).
    auto tile = [&](auto sample_tag, int t, int tp) {
      constexpr bool kSample = decltype(sample_tag)::value;
      // (kSplitRG: stage it mod S / 2 of the row group's ring)
      const int stage = Cfg::kLeanLoop ? (Cfg::kSplitRG ? rg * Cfg::kRingStages : 0) + st_i
                        : Cfg::kSplitRG  ? rg * Cfg::kRingStages + it % Cfg::kRingStages
                                         : it % S;
      ptx::mbar_wait(full + stage, Cfg::kLeanLoop ? st_ph : (it / Cfg::kRingStages) & 1);
      if constexpr (Cfg::kLeanLoop) {  // (the next tile's)
        if (++st_i == Cfg::kRingStages) {
          st_i = 0;
          st_ph ^= 1u;
        }
      }
      if (!Cfg::kPipeTail && p.probe == 4) {  // development: does this stage hold the tile this warp expects?
        const int k0s = reinterpret_cast<const volatile int*>(p.counter)[16 + stage];
        if (lane == 0 && k0s != key_base - key_in_tile + tp * Cfg::kBlockKeys) atomicAdd(p.counter + 24 + rg, 1);
      }
      float acc[L::kAcc];
      // The scales before the MMAs, the release after them (tile_scales,
      // sm90_fp8_mqa_logits.cuh: read just before the release, they were the
      // cause of the weight-copy variants' wrong sets).
      float scale0, scale1;
      tile_scales(smem + Cfg::kOffScales + stage * Cfg::kScaleBytes, key_in_tile, scale0, scale1);
      [[maybe_unused]] float2 w[4][4];  // (kWeightsMode 2)
      if constexpr (Cfg::kEarlyWeights) {
        logits_tile_mma_issue_lo<L>(acc, a_lo0 + stage * (Cfg::kKTileBytes >> 4), b_lo0 + qb * (Cfg::kQTileBytes >> 4));
        fused_v3_weights_early(w, ptx::smem_addr(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes) + (rg * 64 + quad) * 8,
                               std::make_integer_sequence<int, 16>{});
        ptx::wgmma_wait<0>();
        ptx::fence_regs(acc);
      } else if constexpr (Cfg::kPipeTail) {
        if constexpr ((Cfg::kQPerm & 8) != 0) {
          asm volatile("mov.b64 %0, %0;\n\tmov.b64 %1, %1;\n\tmov.b64 %2, %2;\n\tmov.b64 %3, %3;"
                       : "+l"(db_k[0]), "+l"(db_k[1]), "+l"(db_k[2]), "+l"(db_k[3]));
          if constexpr ((Cfg::kQPerm & 16) != 0) {  // the A descriptors: new low words into the held pairs
            desc_pairs_set_lo(da_k, a_lo0 + stage * (Cfg::kKTileBytes >> 4));
            logits_mma_issue_dab(acc, da_k, db_k);
            asm volatile("mov.b64 %0, %0;\n\tmov.b64 %1, %1;\n\tmov.b64 %2, %2;\n\tmov.b64 %3, %3;"
                         : "+l"(da_k[0]), "+l"(da_k[1]), "+l"(da_k[2]), "+l"(da_k[3]));
          } else {
            fused_v3_mma_issue_db(acc, a_lo0 + stage * (Cfg::kKTileBytes >> 4), db_k);
          }
        } else {
          logits_tile_mma_issue_lo<L>(acc, a_lo0 + stage * (Cfg::kKTileBytes >> 4), b_lo0 + qb * (Cfg::kQTileBytes >> 4));
        }
        if (Cfg::kAlwaysTail || pend_ok) tile_tail(sample_tag, pend_k0, pend_k1, pend_ka, t - 1);  // while the MMAs run
        ptx::wgmma_wait<0>();
        ptx::fence_regs(acc);
      } else {
        logits_tile_mma_lo<L>(acc, a_lo0 + stage * (Cfg::kKTileBytes >> 4), b_lo0 + qb * (Cfg::kQTileBytes >> 4));
      }
      if constexpr (!Cfg::kRelaxedRelease) release_stage(empty + stage, lane);
      float fin[2][1];
      if constexpr (Cfg::kEarlyWeights) {
        logits_epilogue_reduce_w<4>(acc, w, quad, fin);
      } else if constexpr (Cfg::kWeightsMode == 2) {
        const float2* w2 = reinterpret_cast<const float2*>(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes) + rg * 64;
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int jj = 0; jj < 4; ++jj)
            w[r][jj] = r < Cfg::kRegWRows ? wreg[r < Cfg::kRegWRows ? r : 0][jj]
                       : w2[(Cfg::kQPerm ? r ^ quad : r) * 16 + jj * 4 + quad];  // (kQPerm: slot r holds row r ^ quad)
        if constexpr ((Cfg::kQPerm & 4) != 0) {  // the same loads from the block's four row addresses
          asm volatile("mov.b32 %0, %0;\n\tmov.b32 %1, %1;\n\tmov.b32 %2, %2;\n\tmov.b32 %3, %3;"
                       : "+r"(wa_k[0]), "+r"(wa_k[1]), "+r"(wa_k[2]), "+r"(wa_k[3]));
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            w[r][0] = fused_v3_lds_f2<0>(wa_k[r]);
            w[r][1] = fused_v3_lds_f2<32>(wa_k[r]);
            w[r][2] = fused_v3_lds_f2<64>(wa_k[r]);
            w[r][3] = fused_v3_lds_f2<96>(wa_k[r]);
          }
        }
        if constexpr (Cfg::kQPerm != 0)
          logits_reduce_perm(acc, w, fin);
        else
          logits_epilogue_reduce_w<4>(acc, w, quad, fin);
      } else if constexpr (Cfg::kSmemWeights) {
        float2 w[4][4];
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int jj = 0; jj < 4; jj += 2) {
            const float4 v = wl[r * 2 + jj / 2];
            w[r][jj] = make_float2(v.x, v.y);
            w[r][jj + 1] = make_float2(v.z, v.w);
          }
        if (p.probe == 5) {  // development: does the copy still hold the block's weights?
          const float2* wd = reinterpret_cast<const float2*>(smem + Cfg::kOffWeights + qb * Cfg::kWeightBytes) + rg * 64;
          volatile int* h = reinterpret_cast<volatile int*>(p.counter);
#pragma unroll 1
          for (int r = 0; r < 4; ++r)
#pragma unroll 1
            for (int jj = 0; jj < 4; ++jj) {
              const float2 d = wd[r * 16 + jj * 4 + quad];
              if (__float_as_uint(d.x) != __float_as_uint(w[r][jj].x) || __float_as_uint(d.y) != __float_as_uint(w[r][jj].y)) {
                atomicAdd(p.counter + 16 + rg, 1);
                if (atomicCAS(p.counter + 18, 0, 1) == 0) {
                  h[19] = b;
                  h[20] = t;
                  h[21] = ns;
                  h[22] = static_cast<int>(__float_as_uint(w[r][jj].x));
                  h[23] = static_cast<int>(__float_as_uint(d.x));
                  h[24] = r * 4 + jj;
                  h[25] = tid >> 5;
                  h[26] = pub;
                  h[27] = static_cast<int>(blockIdx.x);
                  h[28] = static_cast<int>(__float_as_uint(w[r][jj].y));
                  h[29] = it;
                  h[30] = lane;
                }
              }
            }
        }
        if constexpr (Cfg::kQPerm != 0)
          logits_reduce_perm(acc, w, fin);
        else
          logits_epilogue_reduce_w<4>(acc, w, quad, fin);
      } else {
        logits_epilogue_reduce_w<4>(acc, wreg, quad, fin);
      }
      if (t + 1 == nt) {  // the block's last MMA has read Q
        __syncwarp();
        if (lane == 0) ptx::mbar_arrive(q_empty + qs);
      }
      const int ka = key_base + tp * Cfg::kBlockKeys;
      const uint32_t k0 = order_key(fin[0][0] * scale0), k1 = order_key(fin[1][0] * scale1);
      if constexpr (Cfg::kRelaxedRelease) {  // after the scales' use: their loads are complete
        __syncwarp();
        if (Cfg::kLeanLoop) {  // (a release arrival: carries whatever a lazy check published)
          if (lane == 0) ptx::mbar_arrive(empty + stage);
        } else if (Cfg::kLazyCheck && rel_next) {  // (carries the counts a lazy check or the gate published)
          if (lane == 0) ptx::mbar_arrive(empty + stage);
          rel_next = false;
        } else if (lane == 0) {
          ptx::mbar_arrive_relaxed(empty + stage);
        }
      }
      if constexpr (Cfg::kPipeTail) {
        pend_k0 = k0;
        pend_k1 = k1;
        pend_ka = ka;
        pend_ok = true;
        ++it;
        return;
      }
      tile_tail(sample_tag, k0, k1, ka, t);
      ++it;
    };

    auto check = [&]() {
      if constexpr (Cfg::kInlineCheck) {
        fused_v3_check_compact<Cfg>(p, ws_cta_base(p, set_off), segcnt_of(pub++), thr_s, hist_all, scratch_all, stats,
                                    rg, warp_in_wg, seg, selector, cnt, thr);
        return;
      }
      const uint4 r = fused_v3_check_call<Cfg>(&p, Cfg::kShares ? qb : cs, pub & 1, cnt, static_cast<uint32_t>(thr),
                                               static_cast<uint32_t>(thr >> 32));
      ++pub;
      cnt = r.x;
      thr = (static_cast<uint64_t>(r.z) << 32) | r.y;
    };
    int t = 0, tp = nt - 1;
    if constexpr (Cfg::kShares)
      for (; t < t_begin; ++t) tp = next_tile(tp, nt, stride);
    // kLeanLoop: tiles left until the next check ((t + 1) % kCheckTiles == 0 as a countdown;
    // kShares: from the visit's first walk position t_begin, so the checks fall where 66's do)
    int chk_left = Cfg::kCheckTiles - (Cfg::kShares ? t_begin % Cfg::kCheckTiles : 0);
    auto check_due = [&](int tt) {
      if constexpr (Cfg::kLeanLoop) {
        if (--chk_left != 0) return false;
        chk_left = Cfg::kCheckTiles;
        return tt + 1 < nt;
      } else {
        return (tt + 1) % Cfg::kCheckTiles == 0 && tt + 1 < nt;
      }
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
      if constexpr (Cfg::kPairGate) {
        const bool gd = fused_v3_gate_pair_call<Cfg>(&p, Cfg::kShares ? 2 : cs, (pub - 1) & 1, b, active, ns);
        if (selector) row_gated = gd;
      } else if (selector) {
        row_gated = fused_v3_gate<Cfg>(p, ws_cta_base(p, set_off), segcnt, thr_s, ctl, hist_all, scratch_all, stats, b,
                                       sel_row, active, ns);
      }
      ptx::named_barrier_sync(bar_rg, 256);
      // Drop this warp's sample entries below the gate (its 4 rows' segments, in place).
      thr = thr_s[my_row];
      uint32_t* ws_set = ws_cta_base(p, set_off);
      const int gate_target = p.target > 0 ? p.target : fused_gate_target(k);
      const bool drop = !Cfg::kLazyDrop || 16 * ns + (5 * gate_target) / 32 > p.cap - (Cfg::kLazyCheck ? 32 : 16) * Cfg::kCheckTiles;
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
      if (!(Cfg::kTimingCut & 4) && check_due(t)) {
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

    // ---- block end: one warp per row selects over the row's 8 segments ----
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
    if constexpr (Cfg::kAsyncSelect) {
      // Hand the block over to the selector warps (fused_v3_select_loop): the
      // final counts, whether each row is gated, the block; its thresholds are
      // in thr_s. Every lane's appends are ordered before its warp's arrival.
      uint32_t* fin = reinterpret_cast<uint32_t*>(smem + Cfg::kOffFinCnt) + cs * 8 * NS;
      if (lane < 4) fin[(4 * rg + lane) * NS + seg] = cnt;
      if (selector && lane == 0) reinterpret_cast<volatile uint32_t*>(smem + Cfg::kOffGated)[cs * 8 + sel_row] = row_gated;
      if (tid == 0) {
        sel_info[cs * 4 + 0] = b;
        sel_info[cs * 4 + 1] = static_cast<int>(active);
      }
      __threadfence_block();
      __syncwarp();
      if (lane == 0) ptx::mbar_arrive(sel_full + cs);
      continue;
    }
    uint32_t* segcnt = segcnt_of(pub);
    if (lane < 4) segcnt[(4 * rg + lane) * NS + seg] = cnt;
    ptx::named_barrier_sync(bar_rg, 256);  // every append and count of the row group visible
    if (Cfg::kPairSelect || selector) {
      // kPairSelect: both warps of row sel_row (key groups 0 and 1) select it;
      // otherwise its first warp (the selector) alone. The selector holds the
      // gate flag and reports the row.
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
        if constexpr (Cfg::kPairSelect) {
          if constexpr (!(Cfg::kTimingCut & 2)) ok = fused_v3_pair_end_call<Cfg>(&p, Cfg::kShares ? 2 : cs, pub & 1, b, row_gated);
        } else {
          // (The same steps as fused_v3_finish_row, kept inline: the op's kernel
          // was validated and timed in this form; moving it into the helper
          // changes its SASS, so that needs a GPU timing round.)
          uint32_t* hist = hist_all + r * 256;
          uint32_t* sk = scratch_all + r * 2 * kScratch;
          uint32_t* si = sk + kScratch;
          const uint32_t* seg0 = ws_cta_base(p, set_off) + size_t(r * NS) * seg_stride;
          const SegLanes sl =
              make_seg_lanes(seg0, seg_stride, static_cast<uint32_t>(p.cap), segcnt + r * NS, NS, lane);
          int start;
          const int n = row_length(p, row, &start);
          const uint32_t need = min(static_cast<uint32_t>(k), static_cast<uint32_t>(n));
          int* orow = p.out + size_t(row) * k;
          uint32_t cands = 0;
          ok = warp_finish_row<true>(sl, thr_s[r], static_cast<uint32_t>(k), need, row_gated, start, hist, sk, si,
                                     lane, &cands, [&](int at, int v, uint32_t) { orow[at] = v; });
          if (p.probe == 2 && lane == 0) {
            atomicAdd(stats + 4, static_cast<unsigned long long>(cands));
            atomicAdd(stats + 13, 1ull);
            if (!ok) atomicAdd(stats + 8, 1ull);
          }
        }
      }
      if (selector) {
        if (lane == 0) {
          thr_s[r] = 0;
          if constexpr (Cfg::kGateRange) reinterpret_cast<uint32_t*>(smem + Cfg::kOffSmax)[r] = 0;
          if (!ok) atomicOr(&redo_rg[cs * 2 + rg], 1u << r);
        }
        ptx::named_barrier_sync(1 + wg_u, 128);  // the row group's 4 rows are selected (or, pairs: reported)
        if ((tid & 127) == 0) {
          // Each row group reports its half of the block (its rows to redo, if
          // any); the producer ends once every half it issued has reported.
          volatile uint32_t* rr = redo_rg + cs * 2 + rg;
          const uint32_t mask = *rr;
          *rr = 0;
          if (Cfg::kSplitRG && rg == 1) fused_v3_half_finished(rq1, b, mask);
          else fused_v3_half_finished(ctl, b, mask);
        }
        if (p.probe == 2 && lane == 0) atomicAdd(stats + 5, static_cast<unsigned long long>(clock64() - t_sel));
      }
    }
    // One candidate set: the next block reuses these segments only after the selects.
    if constexpr (Cfg::kSets == 1) ptx::named_barrier_sync(bar_rg, 256);
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
// The configurations (dev variants 12-21 of csrc/dev/fused_v3_probes.cu).
// Until 2026-12-02 (session 8) the weight-copy variants (kWeightsMode 1 or 3:
// 12, 13, 14, 17) and the asynchronous select at 32 registers (20) returned
// wrong sets (12: up to 1693 of 8192 rows at the headline): their tile loops
// spill (or their selector warps do), and under that memory traffic the key
// scales, read just before the stage's release, were served after the refill.
// With the scales read before the MMAs (tile_scales) every variant is exact
// (tools/v3check; BENCHMARKS.md, session 8).
using Sm90FusedV3S8 = Sm90FusedV3Config<8, 1>;                     // 12: 8 stages, one set, smem copy (spills)
using Sm90FusedV3S7Sets2 = Sm90FusedV3Config<7, 2>;                // 13: 7 stages, two sets, smem copy
using Sm90FusedV3Inline = Sm90FusedV3Config<8, 1, 8, true, true>;  // 14: the check inlined, smem copy
using Sm90FusedV3S8RegW = Sm90FusedV3Config<8, 1, 8, false>;       // 15: register weights (spills)
using Sm90FusedV3Direct = Sm90FusedV3Config<8, 1, 8, 2>;           // 16: weights from the TMA buffer
using Sm90FusedV3CopySync = Sm90FusedV3Config<8, 1, 8, 3>;         // 17: copy + row group barrier
using Sm90FusedV3RegWInline = Sm90FusedV3Config<8, 1, 8, 0, true>; // 18: register weights, check inlined
using Sm90FusedV3DirectSets2 = Sm90FusedV3Config<7, 2, 8, 2>;      // 19: direct weights, two sets
using Sm90FusedV3Async = Sm90FusedV3Config<7, 2, 8, 2, false, true>;  // 20: 19 with the selects on the producer warpgroup
using Sm90FusedV3Async104 = Sm90FusedV3Config<7, 2, 8, 2, false, true, 104>;  // 21: 20 with 104 / 64 registers
using Sm90FusedV3Check12 = Sm90FusedV3Config<8, 1, 12, 2>;         // 22: 16 with a compaction check every 12 tiles
using Sm90FusedV3Pair = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true>;  // 23: 22 with pair selects at the block end
using Sm90FusedV3PairGate = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true>;  // 24: 23 with the pair gate
using Sm90FusedV3LazyDrop = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true>;  // 25: 24, small samples not dropped
using Sm90FusedV3SelPhases = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, true>;  // 26: 25 + select phase stats
using Sm90FusedV3GateRange = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true>;  // 27: 25 binning from the gate
using Sm90FusedV3WideOut = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 6>;  // 28: 27, 6 groups in the output pass
using Sm90FusedV3Target125 =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 1>;  // 29: 27, gate target 1.25 k + 256
using Sm90FusedV3RankFloor =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 1, 5>;  // 30: 29, rank floor mu + 5 sqrt(mu)
using Sm90FusedV3FloorCapped =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 1, 5, true>;  // 31: 30, floor where the sample is capped
using Sm90FusedV3SafeTarget =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true>;  // 32: 31 with 27's target 1.5 k + 256
using Sm90FusedV3Shares =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 1>;  // 33: 32 on equal shares (split blocks)
using Sm90FusedV3SharesWhole =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 2>;  // 34: 33, whole blocks as one-piece splits
using Sm90FusedV3SharesHybrid =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 5>;  // 35: 33, shares over the partial waves only
using Sm90FusedV3SharesWholeHybrid =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 6>;  // 36: 34, shares over the partial waves only
using Sm90FusedV3HybridEarlyW =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 5, true>;  // 37: 35, weights loaded during the MMAs
using Sm90FusedV3EarlyW =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 0, true>;  // 38: 32, weights loaded during the MMAs
// Dev timing cuts of 32 (wrong sets by design; v3check time only):
using Sm90FusedV3CutStores =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 0, false, 1>;  // 39: 32 without the main loop's stores
using Sm90FusedV3CutSelect =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 0, false, 2>;  // 40: 32 without the block-end select
using Sm90FusedV3CutBoth =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 0, false, 3>;  // 41: 32 without either
using Sm90FusedV3LeanFilter =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 0, false, 0, true>;  // 42: 32, lean filter and appends
using Sm90FusedV3HybridLean =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 5, false, 0, true>;  // 43: 35, lean filter and appends
// Session 14 (dev): the check barriers' cost, the tail overlap, relaxed stage releases.
using Sm90FusedV3CutChecks =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 0, false, 4, true>;  // 44: 42 without the checks after the gate (timing)
using Sm90FusedV3PipeTail =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 0, false, 0, true, true>;  // 45: 42, tails overlap the next MMAs
using Sm90FusedV3PipeRelaxed =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 0, false, 0, true, true, true>;  // 46: 45, relaxed releases
using Sm90FusedV3Relaxed =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 0, false, 0, true, false, true>;  // 47: 42, relaxed releases
using Sm90FusedV3PipeLazy =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 0, false, 0, true, true, true, true>;  // 48: 46, lazy checks
using Sm90FusedV3RegW1 =
    Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 0, false, 0, true, true, true, true, 1>;  // 49: 48, row 0's weights in registers
// (rows 0-1 in registers: ptxas spills 11 LDL / STL into the scan loop; not kept)
using Sm90FusedV3SplitRG = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true, 0,
                                             false, 0, true, true, true, true, 0, true>;  // 50: 48, row groups decoupled
using Sm90FusedV3SplitRGW1 = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true,
                                               0, false, 0, true, true, true, true, 1, true>;  // 51: 49, row groups decoupled
using Sm90FusedV3LeanLoop = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true,
                                              0, false, 0, true, true, true, true, 0, false, 1>;  // 52: 48, lean tile loop
using Sm90FusedV3LeanStores = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true,
                                                0, false, 0, true, true, true, true, 0, false, 3>;  // 53: 52, predicated appends
using Sm90FusedV3LeanTail = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true,
                                              0, false, 0, true, true, true, true, 0, false, 7>;  // 54: 53, the tail without a flag
template <int kTopk>  // 56: 54 for one topk (the index store at an immediate offset)
using Sm90FusedV3LeanFixed = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true,
                                               0, false, 0, true, true, true, true, 0, false, 7, kTopk>;
// session 16: the select-free reduce-scatter (kQPerm) on 56
// (the per-lane weight copy, mode 1, on 56 does not fit: 2 KB over the shared memory limit)
template <int kTopk>  // 57: 56 with kQPerm (weights from the TMA buffer at the permuted rows)
using Sm90FusedV3QPerm = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true,
                                           0, false, 0, true, true, true, true, 0, false, 7, kTopk, 1>;
template <int kTopk>  // 58: 57 with the quad masks held in registers
using Sm90FusedV3QPermMasks = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true,
                                                0, false, 0, true, true, true, true, 0, false, 7, kTopk, 3>;
template <int kTopk>  // 59: 58 with the weight rows' addresses held in registers
using Sm90FusedV3QPermAddr = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true,
                                               0, false, 0, true, true, true, true, 0, false, 7, kTopk, 7>;
template <int kTopk>  // 60: 59 with the block's Q descriptors held
using Sm90FusedV3QPermDesc = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true,
                                               0, false, 0, true, true, true, true, 0, false, 7, kTopk, 15>;
template <int kTopk>  // 61: 60 with the A descriptors' pairs held
using Sm90FusedV3QPermDescA = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true,
                                                0, false, 0, true, true, true, true, 0, false, 7, kTopk, 31>;
template <int kTopk>  // 62: 61 with the one-pass sample gate
using Sm90FusedV3FastGate = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5, true,
                                              0, false, 0, true, true, true, true, 0, false, 7, kTopk, 31, true>;
// 63: 43 (the op's split kernel) with the one-pass sample gate for its whole blocks
using Sm90FusedV3HybridFastGate = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5,
                                                    true, 5, false, 0, true, false, false, false, 0, false, 0, 0, 0, true>;
// session 18 (issue 12): 63 with the split blocks' selects from the pieces' published histograms
// (kSplitHist): 64 the merge (bit 1), 65 the merge and the shared gate (bits 1, 2)
using Sm90FusedV3SplitHistMerge = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5,
                                                    true, 5, false, 0, true, false, false, false, 0, false, 0, 0, 0, true,
                                                    1>;
using Sm90FusedV3SplitHist = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5,
                                               true, 5, false, 0, true, false, false, false, 0, false, 0, 0, 0, true, 3>;
using Sm90FusedV3SplitHistRegs = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                   5, true, 5, false, 0, true, false, false, false, 0, false, 0, 0, 0,
                                                   true, 7>;  // 66: 65 with the gate's records read once
using Sm90FusedV3SplitHistLat = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                  5, true, 5, false, 0, true, false, false, false, 0, false, 0, 0, 0,
                                                  true, 15>;  // 67 (dev): 66 with dependent-load chases (probe 6)
using Sm90FusedV3SplitDist = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                               5, true, 5, false, 0, true, false, false, false, 0, false, 0, 0, 0,
                                               true, 23>;  // 68: 66 with the merge by every piece (kSplitHist 16)
using Sm90FusedV3SplitLean = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                               5, true, 5, false, 0, true, false, true, false, 0, false, 3, 0, 0,
                                               true, 7>;  // 69: 66 on the lean loop (kLeanLoop 3, kRelaxedRelease)
template <int kTopk>  // 70: 69 for one topk (the appends' index store at an immediate offset)
using Sm90FusedV3SplitLeanFixed = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                    5, true, 5, false, 0, true, false, true, false, 0, false, 3, kTopk, 0,
                                                    true, 7>;
template <int kTopk>  // 71: 70 with the select-free reduce-scatter (kQPerm 7: permuted Q rows, masks and weight rows held)
using Sm90FusedV3SplitQPerm = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                5, true, 5, false, 0, true, false, true, false, 0, false, 3, kTopk, 7,
                                                true, 7>;
template <int kTopk>  // 72: 71 with each tile's filter and appends overlapping the next tile's MMAs (kPipeTail)
using Sm90FusedV3SplitPipe = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                               5, true, 5, false, 0, true, true, true, false, 0, false, 3, kTopk, 7,
                                               true, 7>;
template <int kTopk>  // 73: 72 with the Q and A descriptors held (kQPerm 31)
using Sm90FusedV3SplitPipeDesc = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4,
                                                   2, 5, true, 5, false, 0, true, true, true, false, 0, false, 3, kTopk,
                                                   31, true, 7>;
template <int kTopk>  // 76 (dev, session 20): 72 with probe 8's timeline marks (kSplitHist bit 8)
using Sm90FusedV3SplitPipeMarks = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4,
                                                    2, 5, true, 5, false, 0, true, true, true, false, 0, false, 3, kTopk,
                                                    7, true, 15>;
// session 20: the shared gate ranked once per block and published (kSplitHist bit 32): 77 = 66 + it,
// 78 = 72 + it; 79 and 80: the same with probe 8's timeline marks (bit 8)
using Sm90FusedV3SplitGatePub = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                  5, true, 5, false, 0, true, false, false, false, 0, false, 0, 0, 0,
                                                  true, 39>;
template <int kTopk>
using Sm90FusedV3SplitPipePub = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                  5, true, 5, false, 0, true, true, true, false, 0, false, 3, kTopk, 7,
                                                  true, 39>;
using Sm90FusedV3SplitGatePubMarks = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4,
                                                       2, 5, true, 5, false, 0, true, false, false, false, 0, false, 0,
                                                       0, 0, true, 47>;
template <int kTopk>
using Sm90FusedV3SplitPipePubMarks = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4,
                                                       2, 5, true, 5, false, 0, true, true, true, false, 0, false, 3,
                                                       kTopk, 7, true, 47>;
// session 20: the shared gate's bins summed by loads at the shifted offsets, no atomics (kSplitHist bit 64):
// 81 = 66 + it, 82 = 81 + probe 8's marks, 83 = 72 + it, 84 = 83 + the marks
using Sm90FusedV3SplitGateSum = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                  5, true, 5, false, 0, true, false, false, false, 0, false, 0, 0, 0,
                                                  true, 71>;
using Sm90FusedV3SplitGateSumMarks = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4,
                                                       2, 5, true, 5, false, 0, true, false, false, false, 0, false, 0,
                                                       0, 0, true, 79>;
// 85 (dev, probe 8): 67 ranking its shared gate twice (kSplitHist bit 128; the second's marks in visit slot 6):
// whether the gate's time is its round trips under load or first touches
using Sm90FusedV3SplitGateTwice = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4,
                                                    2, 5, true, 5, false, 0, true, false, false, false, 0, false, 0,
                                                    0, 0, true, 143>;
template <int kTopk>
using Sm90FusedV3SplitPipeSum = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                  5, true, 5, false, 0, true, true, true, false, 0, false, 3, kTopk, 7,
                                                  true, 71>;
template <int kTopk>
using Sm90FusedV3SplitPipeSumMarks = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4,
                                                       2, 5, true, 5, false, 0, true, true, true, false, 0, false, 3,
                                                       kTopk, 7, true, 79>;
// session 20: the split protocol's lean fences (kSplitHist bit 256): 86 = 66 + them, 87 = 72 + them
using Sm90FusedV3SplitFence = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                5, true, 5, false, 0, true, false, false, false, 0, false, 0, 0, 0,
                                                true, 263>;
template <int kTopk>
using Sm90FusedV3SplitPipeFence = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                    5, true, 5, false, 0, true, true, true, false, 0, false, 3, kTopk, 7,
                                                    true, 263>;
// session 21: aligned pieces (kSplitHist bit 512, fused_v3_align_piece): 88 = 86 + them, 89 = 87 + them
using Sm90FusedV3SplitAlign = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                5, true, 5, false, 0, true, false, false, false, 0, false, 0, 0, 0,
                                                true, 775>;
template <int kTopk>
using Sm90FusedV3SplitPipeAlign = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                    5, true, 5, false, 0, true, true, true, false, 0, false, 3, kTopk, 7,
                                                    true, 775>;
// 91 = 88, 92 = 89 launched as clusters of the aligned pieces (kSplitHist bit 1024, fused_v3_cluster_plan)
using Sm90FusedV3SplitAlignCl = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                  5, true, 5, false, 0, true, false, false, false, 0, false, 0, 0, 0,
                                                  true, 1799>;
template <int kTopk>
using Sm90FusedV3SplitPipeAlignCl = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4,
                                                      2, 5, true, 5, false, 0, true, true, true, false, 0, false, 3,
                                                      kTopk, 7, true, 1799>;
// 93 = 88, 94 = 89 with the list gate (kSplitHist bit 2048, fused_v3_publish_list / fused_v3_union_gate_list)
using Sm90FusedV3SplitAlignList = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4,
                                                    2, 5, true, 5, false, 0, true, false, false, false, 0, false, 0,
                                                    0, 0, true, 2823>;
template <int kTopk>
using Sm90FusedV3SplitPipeAlignList = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true,
                                                        4, 2, 5, true, 5, false, 0, true, true, true, false, 0, false,
                                                        3, kTopk, 7, true, 2823>;
// 90 (dev, probe 8): 88 with the timeline's marks (kSplitHist bit 8), for `v3check timeline`
using Sm90FusedV3SplitAlignMarks = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4,
                                                     2, 5, true, 5, false, 0, true, false, false, false, 0, false, 0,
                                                     0, 0, true, 783>;
// (session 19, bisecting 69's reruns' order: 74 = 66 + kRelaxedRelease, 75 = 74 + kLeanLoop 1)
using Sm90FusedV3SplitRelaxed = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                  5, true, 5, false, 0, true, false, true, false, 0, false, 0, 0, 0,
                                                  true, 7>;
using Sm90FusedV3SplitLean1 = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2,
                                                5, true, 5, false, 0, true, false, true, false, 0, false, 1, 0, 0,
                                                true, 7>;
using Sm90FusedV3LeanFlagless = Sm90FusedV3Config<8, 1, 12, 2, false, false, 112, true, true, true, false, true, 4, 2, 5,
                                                  true, 0, false, 0, true, true, true, true, 0, false, 5>;  // 55: 52, the tail without a flag
// (A 544-thread configuration with one producer warp and __maxnreg__(120) was
// tried on 2026-12-02 and failed to launch: "too many resources"; removed.)
// The op's fused kernel on whole blocks (one set: the v2 kernel's workspace):
// variant 25 since 2026-12-02 (session 9): 22 (direct weights, 8 stages, a
// compaction check every 12 tiles) with the gate and the block-end select run
// by both warps of each row and small samples left undropped. At 8192 x 16384
// (tools/v3check, same call) 1.352 / 1.209 / 1.213 ms at top-2048 / 1024 / 512
// against 22's 1.538 / 1.323 / 1.290; at the headline top-2048 5.207 against
// 5.365 (BENCHMARKS.md, session 9).
// Variant 32 since 2026-12-02 (session 10): 25 with the block-end select of a
// row still at its gate binning [gate, sample max] (27: no range pass) and
// the gate's rank floor mu + 5 sqrt(mu) where the sample is capped (long
// rows: 25 redid 10-61 rows of 8192 at 131K-262K keys, 32 none). The tighter
// target 1.25 k + 256 (29-31) was 1% faster at 16K keys on gaussian rows but
// 19-25% slower on DSA-like rows at the headline (most likely redos: with
// position-correlated scores the tile sample is not a uniform one; not yet
// measured per row); kept as dev variants. mqa-topk crossover on 32 (one
// call): fused from 8192 keys for every topk; headline 5.248 against native
// 5.715 ms (BENCHMARKS.md, session 10).
// Variant 42 since 2026-12-03 (session 13): 32 with the lean filter and
// appends (kLeanFilter: 16-20 instructions fewer per tile, no stack frame).
// tools/v3check, one call: headline 4.859 against 32's 4.955 ms, 8192 x
// 16384 top-2048 1.311 against 1.334 (native 1.317), top-512 1.178 against
// 1.201, 4096 x 65536 2.521 against 2.583; exact on every check
// (BENCHMARKS.md, session 13).
// Variant 46 since 2026-12-03 (session 14): 42 with each tile's filter and
// appends overlapping the next tile's MMAs (kPipeTail) and relaxed stage
// releases after the scales' use (kRelaxedRelease). tools/v3check, one call:
// headline 4.765 against 42's 4.868 ms, 8192 x 16384 top-2048 1.299 against
// 1.315, top-512 1.167 against 1.182, 4096 x 65536 2.468 against 2.527;
// exact on every check (BENCHMARKS.md, session 14).
// Variant 48 since 2026-12-03 (session 14): 46 with lazy compaction checks
// (kLazyCheck: no barrier after the gate unless a check may be due).
// tools/v3check, one call: headline 4.691 against 46's 4.778 and 42's 4.854
// ms, 8192 x 16384 top-2048 1.288 / 1.295 / 1.313, top-512 1.156 / 1.163 /
// 1.174, 4096 x 65536 2.435 / 2.465 / 2.514; exact on every check, with
// compactions (8192 x 16384 top-2048: 24) and adversarial rows.
// Variant 52 since 2026-12-03 (session 15): 48 with a lean tile loop
// (kLeanLoop: the stage and phase as counters, the check interval as a
// countdown, one release arrival per stage; 398 -> 390 SASS instructions in
// the main loop, fewer on its common path). tools/v3check, one call: headline
// 4.634 against 48's 4.763 ms, 8192 x 16384 top-2048 1.272 / 1.293, top-512
// 1.148 / 1.158, 4096 x 65536 2.395 / 2.443; exact on 41 checks
// (BENCHMARKS.md, session 15). 53 / 54 (predicated appends, no pending flag)
// were 0.5-1.5% slower than 52 at 64K keys in that call.
// Variant 54 since 2026-12-03 (session 15, after 52's op round): 52 with the
// appends as predicated stores and the pending tail run without a flag (main
// loop 364 SASS instructions). tools/v3check, two calls: equal to 52 at the
// headline (4.627 / 4.628 against 4.624 / 4.625 ms in the second), 0.5-2%
// faster at 8192 x 16384 (1.270 / 1.266 against 1.283 / 1.272) and 4096 x
// 65536 (2.441 / 2.402 against 2.488 / 2.395); exact on 48 checks.
using Sm90FusedV3Default = Sm90FusedV3LeanTail;
// The op's whole-block kernels since 2026-12-03 (session 15): variant 56, 54
// for one topk each (csrc/fused_mqa_topk_v3_t*.cu), so the appends' index
// store is at an immediate offset from the key store (main loop 364 -> 356).
// tools/v3check, one call: headline 4.525 / 4.597 against 54's 4.620 / 4.621
// ms, 8192 x 16384 top-2048 1.241 / 1.260, top-512 1.118 / 1.137, 4096 x
// 65536 2.388 / 2.401; exact on 8 checks (BENCHMARKS.md, session 15).
// Sm90FusedV3Default (54) stays the one-configuration reference (CI, dev).
// Since session 16 (2026-12-03): variant 61, 56 with the select-free
// reduce-scatter (kQPerm: the Q rows permuted in shared memory) and the
// loop-invariant registers held (the quad masks, the weight rows' addresses,
// the Q descriptors and the A descriptors' high words): main loop 356 -> 324
// SASS instructions. Then variant 62: 61 with the one-pass sample gate
// (kFastGate: gate + drop cycles per math warp 382K -> 213K at the
// headline). tools/v3check: see BENCHMARKS.md, session 16.
template <int kTopk>
using Sm90FusedV3Whole = Sm90FusedV3FastGate<kTopk>;
// The op's split kernel since 2026-12-03 (session 14; issue 12): variant 43
// (shares over the partial last wave, lean filter), launched where
// fused_use_split says the whole blocks would leave the last wave poorly
// filled. tools/v3check (session 13): 2120 x 65536 top-2048 1.409 ms against
// native 1.458; 1064 rows 0.775 / 0.764 (top-2048), 0.747 / 0.742 (top-512);
// 512 rows 0.444 / 0.380; the v2 split kernel it replaces was 1.3-4x native.
// Since session 16: variant 63 (43 with the one-pass sample gate for its
// whole blocks; tools/v3check at 64K keys: 1064 rows top-2048 0.746 against
// 43's 0.772 ms, 2120 rows 1.371 against 1.401; BENCHMARKS.md, session 16).
// Since session 18 (2026-12-04): variant 65, 63 with the split blocks'
// cross-piece selects from the pieces' published histograms (kSplitHist 3:
// the shared gate from shifted sample bins, the last piece's merge by one
// gather pass over the summed final bins) and the sample copy's loads all in
// flight. tools/v3check at 64K keys, top-2048 (fused / native ms): 64 rows
// 0.136-0.141 against 63's 0.181 (0.078), 256 rows 0.268 / 0.311 (0.189),
// 512 rows 0.384 / 0.445 (0.350), 1064 rows 0.729 / 0.751 (0.695), 2120 rows
// 1.354 / 1.376 (1.333); exact on 16 checks (BENCHMARKS.md, session 18).
// Then variant 66 (65 with the gate's records read once: the union maximum
// and the tile cap from registers, 8 pieces' bins in flight; gate 32K -> 25K
// cycles per math warp at 64 rows): same call, 64K keys, 65 / 66 ms: 64 rows
// top-2048 0.142 / 0.138, top-512 0.119 / 0.114, 256 rows 0.257 / 0.254, 512
// rows 0.389 / 0.387, 1064 rows 0.742 / 0.741, 1576 rows 1.062 / 1.058, 2120
// rows 1.376 / 1.379 (round 6).
// Since session 20: variant 86, 66 with the split protocol's lean fences
// (kSplitHist bit 256: fence.acq_rel.gpu by the one signalling / acquiring
// thread after the row group's barrier, where every writer ran
// __threadfence, fence.sc.gpu); same call, 64K keys, 66 / 86 ms: 64 rows
// top-512 0.110 / 0.108, top-2048 0.119 / 0.117, 256 rows 0.232 / 0.227 and
// 0.243 / 0.241 (round 7); exact on 7 checks.
using Sm90FusedV3Split = Sm90FusedV3SplitFence;
// Session 19 (2026-12-04), opt-in until session 20 found the merge's race
// (its reruns' order, BENCHMARKS.md session 19 rounds 12-13, session 20),
// the default since: where the split grid is every SM (more than SMs / 4 row
// blocks: fused_v3_split_large), first variant 71, one configuration per topk: 66 on the lean loop (kLeanLoop 3: stage counters, the check
// countdown, predicated appends; kRelaxedRelease; kFixedTopk) with the
// select-free reduce-scatter (kQPerm 7). Tile loops 321 / 300 SASS
// instructions against 66's 357 / 337. tools/v3check (round 7, same call,
// 64K keys, 66 / 71 ms, native): 512 rows top-2048 0.370 / 0.363 (0.345),
// 1064 rows 0.711 / 0.679 (0.687), 1576 rows top-1024 0.990 / 0.945
// (0.964), 2120 rows 1.321 / 1.236 (1.314); exact on 17 checks. At fewer
// blocks (grid 128 at 64 and 256 rows) 66 stays: there 71 was slower (64
// rows 0.117 / 0.122, 256 rows top-512 0.242 / 0.249), its Q buffer loaded
// as 128 two-row boxes per visit (a piece makes two visits of few tiles).
// Then variant 72 (71 with kPipeTail: each tile's filter and appends overlap
// the next tile's MMAs; every visit flushes its pending tail before its
// checks, gate and end): tile loops 353 / 315, and in time (round 10, 64K
// keys, top-2048, 71 / 72 ms) 512 rows 0.357 / 0.354, 1064 rows 0.680 /
// 0.672, 1576 rows 0.958 / 0.944, 2120 rows 1.241 / 1.235; exact on 8
// checks (ragged, relu-saturated, equal, rising). (73, 72 with the Q and A
// descriptors held, was no faster and once gave reruns a different order.)
// Since session 20: variant 87, 72 with the lean fences (1064 rows top-2048
// 0.669 / 0.664, 512 rows 0.355 / 0.354 ms; round 7).
template <int kTopk>
using Sm90FusedV3SplitLarge = Sm90FusedV3SplitPipeFence<kTopk>;
__host__ __device__ constexpr bool fused_v3_split_large(int rows, int sms) { return 4 * ((rows + 7) / 8) > sms; }
static_assert(8 * Sm90FusedV3Default::kSegs * Sm90FusedV3Default::cap(2048) == 2 * 8 * Sm90FusedGated::cap(2048) &&
                  Sm90FusedV3Default::kSets == 1,
              "the op's workspace (sized for the v2 kernel) holds the v3 kernel's");

// kClusterLaunch (dev): the cluster launch of the aligned pieces of `rows`
// rows on at most num_sms CTAs: B = ceil(rows / 8) row blocks, m = num_sms /
// B pieces each (at most 16), m B CTAs in clusters of m. Returns m, or 0 where
// no cluster launch applies (fewer than 2 pieces per block) or the GPU cannot
// hold the B clusters at once (*max_clusters, when given: what
// cudaOccupancyMaxActiveClusters said; the split protocol waits across a
// block's pieces, so its clusters must all be resident): the caller then
// launches num_sms CTAs without clusters.
template <class Cfg>
inline cudaLaunchConfig_t fused_v3_cluster_config(int m, int nb, cudaLaunchAttribute (&attr)[1], cudaStream_t stream) {
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = m;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(m * nb);
  lc.blockDim = dim3(Cfg::kThreads);
  lc.dynamicSmemBytes = Cfg::kSmemBytes;
  lc.stream = stream;
  lc.attrs = attr;
  lc.numAttrs = 1;
  return lc;
}
template <class Cfg>
inline int fused_v3_cluster_plan(int rows, int num_sms, int* max_clusters = nullptr) {
  if (max_clusters) *max_clusters = 0;
  const int nb = (rows + Cfg::kBlockRows - 1) / Cfg::kBlockRows;
  if (nb <= 0) return 0;
  const int m = min(num_sms / nb, 16);
  if (m < 2) return 0;
  static int cached[17] = {};  // per configuration and cluster size (one device in the dev harness)
  if (cached[m] == 0) {
    auto kernel = &sm90_fused_mqa_topk_v3_kernel<Cfg>;
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t lc = fused_v3_cluster_config<Cfg>(m, nb, attr, nullptr);
    int n = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes) != cudaSuccess ||
        (m > 8 && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) ||
        cudaOccupancyMaxActiveClusters(&n, kernel, &lc) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
    cached[m] = n > 0 ? n : -1;
  }
  if (max_clusters) *max_clusters = cached[m] > 0 ? cached[m] : 0;
  return cached[m] >= nb ? m : 0;
}

// Launches the v3 kernel: arguments and contract of launch_sm90_fused_mqa_topk
// (workspace of fused_v3_workspace_bytes<Cfg>(topk, num_sms) bytes).
template <class Cfg>
inline cudaError_t launch_sm90_fused_mqa_topk_v3(const void* q, const void* k, const float* scales,
                                                 const float* weights, const int* starts, const int* ends, int* out,
                                                 void* workspace, int rows, int keys, int topk, int num_sms,
                                                 cudaStream_t stream, int* map_error = nullptr, int probe = 0,
                                                 RangeErrorSink range_err = {}, int target = 0, int share_rule = 0) {
  if (rows <= 0) return cudaSuccess;
  if (Cfg::kFixedTopk != 0 && topk != Cfg::kFixedTopk) return cudaErrorInvalidValue;  // (a dev configuration of one topk)
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
  const int gate_target = target > 0 ? target : Cfg::gate_target(topk);  // a development target, or the configuration's
  Sm90FusedParams p{starts, ends, out, ws, counter, rows, keys, topk, Cfg::cap(topk), probe, range_err, gate_target};
  p.share_rule = share_rule;
  if constexpr (Cfg::kClusterLaunch) {
    if (const int m = fused_v3_cluster_plan<Cfg>(rows, num_sms)) {
      cudaLaunchAttribute attr[1];
      const cudaLaunchConfig_t lc =
          fused_v3_cluster_config<Cfg>(m, (rows + Cfg::kBlockRows - 1) / Cfg::kBlockRows, attr, stream);
      return cudaLaunchKernelEx(&lc, kernel, tm_q, tm_k, tm_s, tm_w, p);
    }
  }
  kernel<<<num_sms, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(tm_q, tm_k, tm_s, tm_w, p);
  return cudaGetLastError();
}

}  // namespace mqa_topk
