// A CPU emulator of one, two or eight CUDA warps, for testing warp-level device code
// off-GPU (csrc/include/mqa_topk/fused/select.cuh under MQA_TOPK_HOST_EMULATION).
//
// 32 fibers (ucontext) per warp, one per lane, run round-robin; every warp
// intrinsic is an exchange point: a lane deposits its value and yields, and
// when it resumes every lane of its warp has deposited, so the intrinsic reads
// the warp's 32 values. run2 runs two warps; pair_barrier() is their 64-thread
// named barrier (a lane yields until all 64 have arrived); run8 runs eight,
// with group_barrier() their 256-thread barrier.
// Between exchange points lanes run one after another, which is what
// race-free warp code may assume (shared-memory atomics become plain adds).
// A lane that finishes while others still wait at an intrinsic (divergent
// intrinsics) is reported as an error. Full masks only.
//
// On x86-64 a lane switch is a few instructions (warp_emu_swap below: the
// callee-saved registers and the stack pointer); elsewhere, or with
// -DWARP_EMU_UCONTEXT, it is swapcontext, which also saves and restores the
// signal mask with a system call on every switch (4-5x slower overall).
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define __device__
#define __host__
#define __forceinline__ inline

struct uint4 {
  uint32_t x, y, z, w;
};
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return uint4{a, b, c, d}; }

namespace warp_emu {

constexpr int kLanes = 256;  // fibers at most (eight warps)
constexpr size_t kStackBytes = size_t(1) << 18;  // per lane

#if defined(__x86_64__) && !defined(WARP_EMU_UCONTEXT)
#define WARP_EMU_FAST_SWITCH 1
// Saves rbp, rbx, r12-r15 on the current stack and the stack pointer in
// *from_sp, then resumes the context whose stack pointer is to_sp.
extern "C" void warp_emu_swap(void** from_sp, void* to_sp);
__asm__(
    ".text\n"
    ".globl warp_emu_swap\n"
    ".type warp_emu_swap, @function\n"
    "warp_emu_swap:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size warp_emu_swap, .-warp_emu_swap\n");
#endif

struct State {
#ifdef WARP_EMU_FAST_SWITCH
  void* main_sp = nullptr;
  void* sp[kLanes];
#else
  ucontext_t main_ctx;
  ucontext_t ctx[kLanes];
#endif
  std::vector<char> stack[kLanes];
  uint64_t slots[2][kLanes];
  long phase[kLanes];
  bool done[kLanes];
  int lane = 0;
  int nlanes = 32;
  std::function<void(int)> body;
  long exchanges = 0;
  long bar_gen = 0;
  int bar_count = 0;
};

inline State& st() {
  static State s;
  return s;
}

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "warp_emu: %s\n", what);
  std::fflush(nullptr);
  std::_Exit(3);  // not exit: its destructors would free the lane stack this may run on
}

inline void swap_lanes(int cur, int next) {  // next < 0: back to run_n
  State& s = st();
#ifdef WARP_EMU_FAST_SWITCH
  warp_emu_swap(&s.sp[cur], next < 0 ? s.main_sp : s.sp[next]);
#else
  swapcontext(&s.ctx[cur], next < 0 ? &s.main_ctx : &s.ctx[next]);
#endif
}

inline void switch_to_next(int cur) {
  State& s = st();
  for (int d = 1; d <= s.nlanes; ++d) {
    const int n = (cur + d) % s.nlanes;
    if (!s.done[n]) {
      s.lane = n;
      if (n != cur) swap_lanes(cur, n);
      return;
    }
  }
  swap_lanes(cur, -1);  // every lane is done
}

// Deposits v, lets every other lane of the warp reach this point, returns the
// warp's 32 values.
inline const uint64_t* exchange(uint64_t v) {
  State& s = st();
  const int L = s.lane;
  const int w0 = L & ~31;
  const long p = s.phase[L]++;
  s.slots[p & 1][L] = v;
  ++s.exchanges;
  switch_to_next(L);
  for (int i = w0; i < w0 + 32; ++i)
    if (s.phase[i] < s.phase[L]) fail("divergent warp intrinsic (a lane skipped or finished early)");
  return s.slots[p & 1] + w0;
}

// A barrier of every lane of the run (a lane yields until all have arrived).
inline void all_barrier() {
  State& s = st();
  const int L = s.lane;
  const long g = s.bar_gen;
  if (++s.bar_count == s.nlanes) {
    s.bar_count = 0;
    ++s.bar_gen;
    return;
  }
  for (long spins = 0; s.bar_gen == g; ++spins) {
    if (spins > 100000000L) fail("barrier never completed (a lane skipped it)");
    switch_to_next(L);
  }
}
// The two warps' 64-thread barrier (run2 only).
inline void pair_barrier() {
  if (st().nlanes != 64) fail("pair_barrier outside run2");
  all_barrier();
}
// The eight warps' 256-thread barrier (run8 only).
inline void group_barrier() {
  if (st().nlanes != 256) fail("group_barrier outside run8");
  all_barrier();
}

inline void trampoline(int lane) {
  State& s = st();
  s.body(lane);
  s.done[lane] = true;
  // Lanes that still wait at an intrinsic are divergent: they will notice.
  switch_to_next(lane);
#ifdef WARP_EMU_FAST_SWITCH
  fail("a finished lane was resumed");  // its stack has no frame to return to
#endif
}

#ifdef WARP_EMU_FAST_SWITCH
// A new lane's first instruction: run_n sets s.lane to the lane it starts.
inline void fiber_entry() { trampoline(st().lane); }
#endif

// Runs body(lane) on n (32, 64 or 256) lanes, in lockstep per warp at every intrinsic.
inline void run_n(int n, std::function<void(int)> body) {
  State& s = st();
  s.body = std::move(body);
  s.nlanes = n;
  s.bar_gen = 0;
  s.bar_count = 0;
  for (int l = 0; l < n; ++l) {
    // Each lane's stack is allocated once and reused by every run (zeroing
    // 32-64 stacks of 256 KiB per run was most of the emulator's time).
    if (s.stack[l].size() != kStackBytes) s.stack[l].assign(kStackBytes, 0);
    s.phase[l] = 0;
    s.done[l] = false;
#ifdef WARP_EMU_FAST_SWITCH
    // The frame warp_emu_swap pops: six zeroed registers, then fiber_entry as
    // the return address, entered with rsp = 8 mod 16 as after a call (a zero
    // return address above it: fiber_entry never returns).
    auto top = reinterpret_cast<uintptr_t>(s.stack[l].data() + s.stack[l].size()) & ~uintptr_t(15);
    void** frame = reinterpret_cast<void**>(top) - 8;
    for (int i = 0; i < 6; ++i) frame[i] = nullptr;
    frame[6] = reinterpret_cast<void*>(&fiber_entry);
    frame[7] = nullptr;
    s.sp[l] = frame;
#else
    getcontext(&s.ctx[l]);
    s.ctx[l].uc_stack.ss_sp = s.stack[l].data();
    s.ctx[l].uc_stack.ss_size = s.stack[l].size();
    s.ctx[l].uc_link = &s.main_ctx;
    makecontext(&s.ctx[l], reinterpret_cast<void (*)()>(&trampoline), 1, l);
#endif
  }
  s.lane = 0;
#ifdef WARP_EMU_FAST_SWITCH
  warp_emu_swap(&s.main_sp, s.sp[0]);
#else
  swapcontext(&s.main_ctx, &s.ctx[0]);
#endif
  for (int l = 0; l < n; ++l)
    if (!s.done[l]) fail("a lane never finished");
}
// One warp: body(lane).
inline void run(std::function<void(int)> body) { run_n(32, std::move(body)); }
// Two warps: body(warp, lane), warp 0 or 1, lane 0 .. 31.
inline void run2(std::function<void(int, int)> body) {
  run_n(64, [body = std::move(body)](int l) { body(l >> 5, l & 31); });
}
// Eight warps: body(warp, lane), warp 0 .. 7, lane 0 .. 31.
inline void run8(std::function<void(int, int)> body) {
  run_n(256, [body = std::move(body)](int l) { body(l >> 5, l & 31); });
}

template <class T>
uint64_t to_bits(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace warp_emu

// ---- the CUDA built-ins the device code uses --------------------------------
inline void __syncwarp(unsigned = 0xffffffffu) { warp_emu::exchange(0); }
inline unsigned __ballot_sync(unsigned, int pred) {
  const uint64_t* v = warp_emu::exchange(pred != 0);
  unsigned m = 0;
  for (int i = 0; i < 32; ++i) m |= (v[i] ? 1u : 0u) << i;
  return m;
}
inline int __any_sync(unsigned, int pred) { return __ballot_sync(0xffffffffu, pred) != 0u; }
template <class T>
T __shfl_sync(unsigned, T v, int src) {
  const uint64_t* x = warp_emu::exchange(warp_emu::to_bits(v));
  return warp_emu::from_bits<T>(x[src & 31]);
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned d) {
  const int L = warp_emu::st().lane & 31;
  const uint64_t* x = warp_emu::exchange(warp_emu::to_bits(v));
  return L >= static_cast<int>(d) ? warp_emu::from_bits<T>(x[L - d]) : v;
}
inline unsigned __reduce_add_sync(unsigned, unsigned v) {
  const uint64_t* x = warp_emu::exchange(v);
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r += static_cast<unsigned>(x[i]);
  return r;
}
inline unsigned __reduce_min_sync(unsigned, unsigned v) {
  const uint64_t* x = warp_emu::exchange(v);
  unsigned r = 0xffffffffu;
  for (int i = 0; i < 32; ++i) r = std::min(r, static_cast<unsigned>(x[i]));
  return r;
}
inline unsigned __reduce_max_sync(unsigned, unsigned v) {
  const uint64_t* x = warp_emu::exchange(v);
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r = std::max(r, static_cast<unsigned>(x[i]));
  return r;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x ? __builtin_clz(static_cast<unsigned>(x)) : 32; }
inline unsigned __umulhi(unsigned a, unsigned b) { return static_cast<unsigned>((uint64_t(a) * b) >> 32); }
inline unsigned __float_as_uint(float f) { return warp_emu::from_bits<unsigned>(warp_emu::to_bits(f)); }
template <class T>
T __ldcg(const T* p) {
  return *p;
}
template <class T>
void __stcg(T* p, T v) {
  *p = v;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned o = *p;
  *p += v;
  return o;
}
using std::max;
using std::min;
