// Which fused kernel runs a call: one pure host function of the call's shape
// (rows, keys, SMs, topk, heads), like DeepGEMM's heuristics. Plain C++ (no
// CUDA, no torch): the CPU tests compile it with the host compiler and check
// it over a table of shapes (tests/test_fused_heuristics.py).
//
// The four kernels (each is exact, with the same tie rule and the same sets):
//   whole   one CTA per 8-row block, blocks from a counter (sm90_fused_blocks.cuh,
//           the whole configuration);
//   split   the call's key tiles in equal shares over every SM, the blocks of a
//           partial last wave split into pieces (the same kernel's split
//           configuration, blocks_split.cuh);
//   staged  at most SMs / 2 row blocks: each block's logits computed by up to
//           16 pieces into a per-call buffer (at most 500 MiB), each row
//           selected by one owner CTA (sm90_fused_staged.cuh);
//   hybrid  one or two row blocks past whole waves (B mod SMs in {1, 2}, B >
//           SMs): whole blocks beside the staged pieces and owners of the
//           last one or two (sm90_fused_hybrid.cuh).
// Why this choice: whole blocks fill whole waves; past them a poorly filled
// last wave costs up to a wave, and splitting blocks evens it out at ~15%
// overhead (the split protocol's gates and merges); few blocks leave most SMs
// idle, where the staged kernel's pieces use them all; one or two blocks past
// a wave cost less as staged pieces than as split shares (docs/FUSED.md gives
// the measurements behind each boundary).
#pragma once

namespace mqa_topk {

enum class FusedKernel : int { kWhole = 0, kSplit = 1, kStaged = 2, kHybrid = 3 };

constexpr int kFusedBlockRows = 8;
// The staged owner's bitmaps cover rows of at most this many keys.
constexpr int kStagedMaxRowKeys = 1 << 19;
// Pieces of one row block in the staged and hybrid kernels, at most (an owner
// sums at most 16 pieces' histograms).
constexpr int kStagedMaxPieces = 16;

constexpr long long fused_row_blocks(int rows) {
  return (static_cast<long long>(rows) + kFusedBlockRows - 1) / kFusedBlockRows;
}

// The staged kernel's logits buffer (rows x keys fp32, rows padded to 16
// bytes) is allocated per call; at most this many bytes, so that a fused call
// never takes more than 512 MiB beyond its fixed workspace (the buffer's
// histograms and counters add at most 32 KB per SM).
constexpr long long kStagedMaxLogitsBytes = 500ll << 20;

// The staged logits buffer (the staged kernel's and the hybrid's staged
// part): rows x staged_logits_ld(keys) fp32 (a 16-byte row pitch), rounded up
// to 256 bytes so what follows it stays aligned.
constexpr long long staged_logits_ld(int keys) { return (keys + 3ll) / 4 * 4; }
constexpr unsigned long long staged_logits_bytes(int rows, int keys) {
  return (static_cast<unsigned long long>(rows) * static_cast<unsigned long long>(staged_logits_ld(keys)) * 4 + 255) /
         256 * 256;
}

// Pieces per row block of the staged kernel for rows x keys on num_sms SMs:
// every block's pieces resident at once (at most num_sms blocks), rows within
// the owner's bitmaps, the logits buffer within kStagedMaxLogitsBytes. 0: it
// does not apply.
constexpr int fused_staged_pieces(int rows, int keys, int num_sms) {
  const long long nb = fused_row_blocks(rows);
  if (rows <= 0 || keys <= 0 || keys > kStagedMaxRowKeys || num_sms <= 0 || nb > num_sms) return 0;
  if (static_cast<long long>(rows) * staged_logits_ld(keys) * 4 > kStagedMaxLogitsBytes) return 0;
  return static_cast<int>(num_sms / nb < kStagedMaxPieces ? num_sms / nb : kStagedMaxPieces);
}

// The hybrid kernel's extra row blocks r = B mod SMs for B > SMs blocks (it
// applies at r = 1 or 2, rows within the owner's bitmaps). 0: it does not apply.
constexpr int fused_hybrid_extra_blocks(int rows, int keys, int num_sms) {
  const long long nb = fused_row_blocks(rows);
  if (rows <= 0 || keys <= 0 || keys > kStagedMaxRowKeys || num_sms <= 0 || nb <= num_sms) return 0;
  const long long r = nb % num_sms;
  return r >= 1 && r <= 2 ? static_cast<int>(r) : 0;
}

// Whether splitting blocks beats whole blocks: the whole-block schedule runs
// ceil(B / SMs) waves; the split one spreads the same tiles evenly at about 15%
// overhead.
constexpr bool fused_split_wins(int rows, int num_sms) {
  const long long nb = fused_row_blocks(rows);
  const long long waves = (nb + num_sms - 1) / num_sms;
  return waves * num_sms * 100 > 115 * nb;
}

// Whether kernel `k` can run the shape at all (a forced kernel must).
constexpr bool fused_kernel_runs(FusedKernel k, int rows, int keys, int num_sms) {
  return k == FusedKernel::kStaged   ? fused_staged_pieces(rows, keys, num_sms) > 0
         : k == FusedKernel::kHybrid ? fused_hybrid_extra_blocks(rows, keys, num_sms) > 0
                                     : num_sms > 0;
}

// The kernel a call runs by default. topk and heads do not move the boundaries
// today (every shipped kernel runs 32 heads; the boundaries were measured at
// every topk); they are arguments so that a rule that needs them changes here
// only.
constexpr FusedKernel choose_fused_kernel(int rows, int keys, int num_sms, int /*topk*/, int /*heads*/) {
  if (2 * fused_row_blocks(rows) <= num_sms && fused_staged_pieces(rows, keys, num_sms) > 0)
    return FusedKernel::kStaged;
  if (fused_hybrid_extra_blocks(rows, keys, num_sms) > 0) return FusedKernel::kHybrid;
  if (fused_split_wins(rows, num_sms)) return FusedKernel::kSplit;
  return FusedKernel::kWhole;
}

constexpr const char* fused_kernel_name(FusedKernel k) {
  return k == FusedKernel::kWhole ? "whole" : k == FusedKernel::kSplit ? "split" : k == FusedKernel::kStaged ? "staged" : "hybrid";
}

}  // namespace mqa_topk
