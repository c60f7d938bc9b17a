// Off-GPU test of the fused kernel's selection (fused_select.cuh), compiled
// with g++ and run by tests/test_fused_select_emu.py on the warp emulator.
//
// 1. warp_select + warp_emit on crafted candidate buffers (one or two
//    segments, thresholds set or not, ties at the threshold key, heavy ties,
//    near ties, sizes around multiples of 4/32/128) against a sorting
//    reference: the threshold returned and the entries kept (in order).
// 2. The kernel's per-row protocol (scrambled tile walk, two warpgroups
//    appending what beats the shared threshold, compaction at cap - 64, the
//    block-end merge) on adversarial rows, against the exact top-k by
//    (value desc, index asc).
// Exit status 0 when every check passes; the first failure is printed.
#define MQA_TOPK_HOST_EMULATION 1
#include "warp_emu.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "mqa_topk/fused_select.cuh"

using namespace mqa_topk::fused_detail;

namespace {

int g_checks = 0;
bool g_lean = false;    // test warp_select_lean instead of warp_select
bool g_window = false;  // protocol: window-histogram compactions (dev variant 2)
long g_window_compactions = 0, g_window_from_hist = 0;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "FAIL: %s\n", msg.c_str());
  std::exit(1);
}
void expect(bool ok, const std::string& msg) {
  ++g_checks;
  if (!ok) die(msg);
}

// A candidate buffer as the kernel keeps it: capacity a multiple of 4 (and
// slack past the count, read by the vector passes and masked).
struct Buf {
  std::vector<uint32_t> key, idx;
  int n = 0;
  explicit Buf(int cap = 0) : key((cap + 3) / 4 * 4 + 4, 0xdeadbeefu), idx((cap + 3) / 4 * 4 + 4, 0xdeadbeefu) {}
  void push(uint32_t k, uint32_t i) {
    key[n] = k;
    idx[n] = i;
    ++n;
  }
};

struct Scratch {
  uint32_t hist[256] = {};
  uint32_t sk[kScratch], si[kScratch];
};

uint64_t run_select(Buf* a, Buf* b, uint64_t thr, uint32_t k, Scratch& sc) {
  Segs s{{a->key.data(), b ? b->key.data() : nullptr}, {a->idx.data(), b ? b->idx.data() : nullptr},
         {a->n, b ? b->n : 0}, b ? 2 : 1};
  uint64_t res[32];
  warp_emu::run([&](int lane) {
    res[lane] = g_lean ? warp_select_lean(s, thr, k, sc.hist, sc.sk, sc.si, lane)
                       : warp_select(s, thr, k, sc.hist, sc.sk, sc.si, lane);
  });
  for (int l = 1; l < 32; ++l) expect(res[l] == res[0], "lanes disagree on the threshold");
  for (int i = 0; i < 256; ++i) expect(sc.hist[i] == 0, "histogram not left zeroed");
  return res[0];
}

// Keeps entries >= t: in place (one segment) or into out (any).
int run_emit_inplace(Buf* a, uint64_t t) {
  Segs s{{a->key.data(), nullptr}, {a->idx.data(), nullptr}, {a->n, 0}, 1};
  int res[32];
  uint32_t* kp = a->key.data();
  uint32_t* ip = a->idx.data();
  warp_emu::run([&](int lane) {
    res[lane] = warp_emit(s, t, lane, [&](int at, uint32_t key, uint32_t idx) {
      kp[at] = key;
      ip[at] = idx;
    });
  });
  for (int l = 1; l < 32; ++l) expect(res[l] == res[0], "lanes disagree on the kept count");
  return res[0];
}

std::vector<std::pair<uint32_t, uint32_t>> run_emit_out(Buf* a, Buf* b, uint64_t t) {
  Segs s{{a->key.data(), b ? b->key.data() : nullptr}, {a->idx.data(), b ? b->idx.data() : nullptr},
         {a->n, b ? b->n : 0}, b ? 2 : 1};
  std::vector<std::pair<uint32_t, uint32_t>> out(a->n + (b ? b->n : 0), {0, 0});
  int res[32];
  warp_emu::run([&](int lane) {
    res[lane] = warp_emit(s, t, lane, [&](int at, uint32_t key, uint32_t idx) { out[at] = {key, idx}; });
  });
  out.resize(res[0]);
  return out;
}

// Reference: the threshold warp_select must return, and the kept list.
uint64_t ref_threshold(const std::vector<std::pair<uint32_t, uint32_t>>& all, uint64_t thr, uint32_t k) {
  const uint32_t tk = static_cast<uint32_t>(thr >> 32);
  std::vector<uint64_t> c;
  for (auto& e : all)
    if (e.first >= tk) c.push_back(composite(e.first, e.second));
  if (c.size() <= k) return thr;
  std::nth_element(c.begin(), c.begin() + (k - 1), c.end(), std::greater<uint64_t>());
  return c[k - 1];
}

std::vector<std::pair<uint32_t, uint32_t>> entries(const Buf& a, const Buf* b) {
  std::vector<std::pair<uint32_t, uint32_t>> v;
  for (int i = 0; i < a.n; ++i) v.push_back({a.key[i], a.idx[i]});
  if (b)
    for (int i = 0; i < b->n; ++i) v.push_back({b->key[i], b->idx[i]});
  return v;
}

void check_select_case(const std::string& name, Buf a, Buf* b, uint64_t thr, uint32_t k) {
  Scratch sc;
  const auto all = entries(a, b);
  const uint64_t want = ref_threshold(all, thr, k);
  const uint64_t got = run_select(&a, b, thr, k, sc);
  // The threshold may sit below the k-th composite (e.g. (key, any index) when
  // every entry with the k-th key is in) but must keep exactly the same set.
  std::vector<std::pair<uint32_t, uint32_t>> kept, kept_ref;
  for (auto& e : all) {
    if (composite(e.first, e.second) >= got) kept.push_back(e);
    if (composite(e.first, e.second) >= want) kept_ref.push_back(e);
  }
  expect(got <= want && kept == kept_ref,
         name + ": threshold " + std::to_string(got) + " keeps another set than " + std::to_string(want));
  if (want == thr) expect(got == thr, name + ": threshold moved though at most k are eligible");
  if (!b) {
    Buf c = a;
    const int n = run_emit_inplace(&c, got);
    expect(n == static_cast<int>(kept.size()), name + ": in-place kept count");
    for (int i = 0; i < n; ++i)
      expect(c.key[i] == kept[i].first && c.idx[i] == kept[i].second, name + ": in-place order/content");
  }
  const auto out = run_emit_out(&a, b, got);
  expect(out == kept, name + ": emitted list (order or content)");
  // Whenever at least k entries are at or above thr, exactly the top k are kept.
  size_t at_or_above = 0;
  for (auto& e : all) at_or_above += composite(e.first, e.second) >= thr;
  if (at_or_above >= k) expect(kept.size() == k, name + ": not exactly k kept");
}

uint32_t okey(float v) { return order_key(v); }

// order_key against float comparison: a < b exactly when key(a) < key(b) and
// a == b exactly when key(a) == key(b) (so -0.0 and +0.0 share a key), over
// the special values and a spread of random ones.
void order_key_cases() {
  std::vector<float> v = {-INFINITY, -FLT_MAX, -1e30f, -2.f, -1.f, -1.f + 1e-7f, -FLT_MIN, -FLT_TRUE_MIN, -0.f, 0.f,
                          FLT_TRUE_MIN, FLT_MIN, 1e-30f, 0.5f, 1.f, 1.f + 1e-7f, 3.f, 1e30f, FLT_MAX, INFINITY};
  std::mt19937 rng(5);
  for (int i = 0; i < 2000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isnan(f)) v.push_back(f);
  }
  for (float a : v)
    for (float b : v) {
      const uint32_t ka = order_key(a), kb = order_key(b);
      expect((a < b) == (ka < kb) && (a == b) == (ka == kb),
             "order_key orders " + std::to_string(a) + " and " + std::to_string(b) + " unlike float comparison");
    }
}

void select_cases() {
  std::mt19937 rng(1234);
  std::normal_distribution<float> gauss(0.f, 1.f);
  for (uint32_t k : {512u, 2048u}) {
    for (int n : {0, 1, 3, 31, 100, int(k) - 1, int(k), int(k) + 1, int(k) + 3, 2 * int(k) + 61, 3 * int(k) + 64}) {
      Buf a(n);
      for (int i = 0; i < n; ++i) a.push(okey(gauss(rng)), rng() % (1u << 22));
      check_select_case("gauss n=" + std::to_string(n) + " k=" + std::to_string(k), a, nullptr, 0, k);
    }
    const int n = 3 * int(k) + 64;
    {  // every key equal: heavy ties resolved by index
      Buf a(n);
      for (int i = 0; i < n; ++i) a.push(okey(0.25f), (i * 7919u) % (1u << 22));
      check_select_case("all equal", a, nullptr, 0, k);
    }
    {  // thousands tied at the k-th value, some above
      Buf a(n);
      for (int i = 0; i < n; ++i) a.push(okey(i % 5 == 0 ? 2.f + gauss(rng) * 0.001f + 3.f : 1.5f), i * 3u);
      check_select_case("boundary ties", a, nullptr, 0, k);
    }
    {  // near ties: thousands of distinct values within 1e-4 relative
      Buf a(n);
      for (int i = 0; i < n; ++i) a.push(okey(100.f * (1.f + 1e-4f * (rng() % 1000) / 1000.f)), i);
      check_select_case("near ties", a, nullptr, 0, k);
    }
    {  // rising scores, negative values, both zeros
      Buf a(n);
      for (int i = 0; i < n; ++i) a.push(okey(i % 7 == 0 ? (i % 2 ? -0.f : 0.f) : float(i) - n / 2.f), i);
      check_select_case("rising/negative/zeros", a, nullptr, 0, k);
    }
    {  // a threshold set, entries below it present (appended before it rose),
       // ties at the threshold key with indices on both sides of its index
      Buf a(n);
      const uint32_t tk = okey(1.0f);
      for (int i = 0; i < n; ++i) {
        const int r = i % 4;
        a.push(r == 0 ? okey(0.5f) : r == 1 ? tk : okey(1.0f + float(rng() % 1000) / 100.f), i * 2u);
      }
      for (uint32_t ti : {0u, 100u, uint32_t(n), 0xffffffffu}) {
        const uint64_t thr = (uint64_t(tk) << 32) | (0xffffffffu - (ti == 0xffffffffu ? 0 : ti));
        check_select_case("threshold set ti=" + std::to_string(ti), a, nullptr, thr, k);
      }
    }
    {  // few at or above the threshold: nothing to cut, only filter
      Buf a(n);
      for (int i = 0; i < n; ++i) a.push(okey(i < 10 ? 5.f : 0.1f), i);
      check_select_case("few eligible", a, nullptr, composite(okey(1.f), 0), k);
    }
    {  // two segments (the block-end merge)
      Buf a(n), b(n - 17);
      for (int i = 0; i < n; ++i) a.push(okey(gauss(rng)), 2 * i);
      for (int i = 0; i < n - 17; ++i) b.push(okey(gauss(rng)), 2 * i + 1);
      check_select_case("two segments", a, &b, 0, k);
      Buf e(0);
      check_select_case("two segments, one empty", a, &e, 0, k);
    }
  }
}

// warp_compact_window directly: keys placed exactly on slice edges (the k-th
// key on its slice's lower edge), narrow windows (one key per bin), keys above
// the window, no threshold: the kept set must contain the exact top k and
// everything kept must be at or above the returned (safe) threshold.
void window_case(const std::string& name, const std::vector<uint32_t>& keys, Window w, uint32_t k, uint64_t thr) {
  const int n = static_cast<int>(keys.size());
  const int cap = n + 8;
  Buf b(cap);
  for (int i = 0; i < n; ++i) b.push(keys[i], static_cast<uint32_t>((i * 7919u) % 1000003u));
  uint32_t whist[256] = {};
  for (int i = 0; i < n; ++i) ++whist[window_bin(w, keys[i])];
  std::vector<uint64_t> c;
  for (int i = 0; i < n; ++i) c.push_back(composite(b.key[i], b.idx[i]));
  std::vector<uint64_t> sorted = c;
  std::sort(sorted.begin(), sorted.end(), std::greater<uint64_t>());
  const uint64_t kth = sorted[std::min<size_t>(k, sorted.size()) - 1];
  Scratch sc;
  uint64_t res[32];
  int kept[32];
  const Buf orig = b;
  warp_emu::run([&](int lane) {
    Window wl = w;
    bool vl = true;
    res[lane] = warp_compact_window(b.key.data(), b.idx.data(), n, thr, k, static_cast<uint32_t>(n), whist, wl, vl,
                                    sc.hist, sc.sk, sc.si, lane, &kept[lane]);
  });
  // Safe: never above the buffer's k-th composite, unless the row's threshold
  // (from elsewhere in the row) already was.
  expect(res[0] <= std::max(kth, thr), name + ": threshold above the k-th composite (unsafe)");
  std::vector<uint64_t> want;  // entries at or above the threshold, in order
  for (int i = 0; i < n; ++i)
    if (composite(orig.key[i], orig.idx[i]) >= res[0]) want.push_back(composite(orig.key[i], orig.idx[i]));
  expect(kept[0] == static_cast<int>(want.size()), name + ": kept count");
  for (int i = 0; i < kept[0]; ++i) expect(composite(b.key[i], b.idx[i]) == want[i], name + ": kept order/content");
  uint32_t total = 0;
  for (int i = 0; i < 256; ++i) total += whist[i];
  expect(total == static_cast<uint32_t>(kept[0]), name + ": new window histogram does not count the kept entries");
}

void window_cases() {
  std::mt19937 rng(7);
  for (uint32_t k : {512u, 2048u}) {
    const int n = 3 * static_cast<int>(k);
    // Keys on slice edges of a wide window.
    const Window w = make_window(0x80000000u, 0x80000000u + 10000000u);
    std::vector<uint32_t> keys(n);
    for (int i = 0; i < n; ++i) keys[i] = window_edge(w, 1 + (rng() % 255));
    window_case("keys on slice edges k=" + std::to_string(k), keys, w, k, 0);
    // One key per bin (span < 256).
    const Window nw = make_window(0xa0000000u, 0xa0000000u + 150u);
    for (int i = 0; i < n; ++i) keys[i] = nw.lo + (rng() % 151);
    window_case("one key per bin", keys, nw, k, 0);
    // Keys above the window top (all in the last bin) and a few inside.
    for (int i = 0; i < n; ++i) keys[i] = i % 10 ? w.lo + w.span + 1 + (rng() % 1000) : w.lo + (rng() % w.span);
    window_case("above the window", keys, w, k, 0);
    // A threshold above the histogram's edge.
    for (int i = 0; i < n; ++i) keys[i] = window_edge(w, 1 + (rng() % 255));
    window_case("threshold above the edge", keys, w, k, composite(window_edge(w, 200), 5));
  }
}

// ---- the per-row protocol of the kernel --------------------------------------
// keys of the row: values v[0..n); returns the emitted relative indices.
std::vector<uint32_t> simulate_row(const std::vector<float>& v, int k, int cap, std::mt19937& rng) {
  const int n = static_cast<int>(v.size());
  const int nt = (n + 127) / 128;
  const int stride = tile_stride(nt);
  Buf buf[2] = {Buf(cap), Buf(cap)};
  uint64_t thr = 0;
  const uint32_t compact_above = static_cast<uint32_t>(k + (cap - k) / 2);
  Scratch sc;
  // Window mode: per warpgroup a histogram of its buffer in its window.
  uint32_t whist[2][256] = {};
  Window win[2] = {};
  bool valid[2] = {false, false};
  for (int t = 0, tp = nt - 1; t < nt; ++t, tp = next_tile(tp, nt, stride)) {
    const int first = rng() & 1;  // the warpgroups run in either order
    for (int o = 0; o < 2; ++o) {
      const int w = first ^ o;
      for (int j = 0; j < 64; ++j) {
        const int i = tp * 128 + w * 64 + j;
        if (i >= n) continue;
        const uint32_t key = order_key(v[i]);
        if (composite(key, i) > thr) {
          if (buf[w].n >= cap) die("candidate buffer overflow");
          buf[w].push(key, i);
          if (g_window && valid[w]) {
            if (key < win[w].lo) die("appended key below the window");
            ++whist[w][window_bin(win[w], key)];
          }
        }
      }
      if (buf[w].n + 64 > cap && static_cast<uint32_t>(buf[w].n) > compact_above) {
        if (g_window) {
          if (valid[w]) {
            uint32_t total = 0;
            for (int b = 0; b < 256; ++b) total += whist[w][b];
            expect(total == static_cast<uint32_t>(buf[w].n), "window histogram does not count the buffer");
          }
          if (valid[w]) ++g_window_from_hist;
          uint64_t res[32];
          int kept[32];
          Window nw[32];
          bool nv[32];
          warp_emu::run([&](int lane) {
            Window wl = win[w];
            bool vl = valid[w];
            res[lane] = warp_compact_window(buf[w].key.data(), buf[w].idx.data(), buf[w].n, thr, k, compact_above,
                                            whist[w], wl, vl, sc.hist, sc.sk, sc.si, lane, &kept[lane]);
            nw[lane] = wl;
            nv[lane] = vl;
          });
          for (int l = 1; l < 32; ++l)
            expect(res[l] == res[0] && kept[l] == kept[0] && nw[l].lo == nw[0].lo && nw[l].span == nw[0].span,
                   "lanes disagree in the window compaction");
          // Safe: at least min(k, entries at or above thr) entries kept, all at or above the threshold.
          buf[w].n = kept[0];
          win[w] = nw[0];
          valid[w] = nv[0];
          thr = std::max(thr, res[0]);
          ++g_window_compactions;
        } else {
          const uint64_t th = run_select(&buf[w], nullptr, thr, k, sc);
          buf[w].n = run_emit_inplace(&buf[w], th);
          thr = std::max(thr, th);
        }
      }
    }
  }
  const uint64_t th = run_select(&buf[0], &buf[1], thr, k, sc);
  std::vector<uint32_t> out;
  for (auto& e : run_emit_out(&buf[0], &buf[1], th)) out.push_back(e.second);
  return out;
}

// The exact top-k of a row by (value desc, index asc), ranked with plain float
// comparisons: independent of the header's order_key/composite, so a bug in
// those (e.g. -0.0 ranked apart from +0.0, or negatives reversed) fails here.
std::vector<uint32_t> float_topk(const std::vector<float>& v, int k) {
  std::vector<uint32_t> order(v.size());
  for (size_t i = 0; i < v.size(); ++i) order[i] = static_cast<uint32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return v[a] > v[b]; });
  order.resize(std::min<size_t>(k, v.size()));
  return order;
}

void check_row(const std::string& name, const std::vector<float>& v, int k, std::mt19937& rng) {
  const int cap = 3 * k + 128;  // fused_candidate_cap
  auto got = simulate_row(v, k, cap, rng);
  const size_t m = std::min<size_t>(k, v.size());
  std::vector<uint32_t> want = float_topk(v, k);
  expect(got.size() == m, name + ": " + std::to_string(got.size()) + " emitted, expected " + std::to_string(m));
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  expect(got == want, name + ": index set differs from the exact top-k");
}

void protocol_cases() {
  std::mt19937 rng(99);
  std::normal_distribution<float> gauss(0.f, 1.f);
  for (int k : {512, 2048}) {
    for (int n : {1, 100, k - 1, k, k + 1, 4 * k + 77, 20000, 70000}) {
      std::vector<float> v(n);
      for (auto& x : v) x = gauss(rng);
      check_row("gauss n=" + std::to_string(n), v, k, rng);
    }
    const int n = 20000;
    std::vector<float> v(n);
    for (int i = 0; i < n; ++i) v[i] = float(i);
    check_row("rising", v, k, rng);
    for (int i = 0; i < n; ++i) v[i] = float(n - i);
    check_row("falling", v, k, rng);
    for (int i = 0; i < n; ++i) v[i] = 0.f;
    check_row("all zero", v, k, rng);
    for (int i = 0; i < n; ++i) v[i] = (i % 3 == 0) ? -0.f : 0.f;
    check_row("signed zeros", v, k, rng);
    for (int i = 0; i < n; ++i) v[i] = (i % 9 == 0) ? 3.f + gauss(rng) : 1.f;  // thousands tie at the k-th
    check_row("boundary ties", v, k, rng);
    for (int i = 0; i < n; ++i) v[i] = 7.f * (1.f + 1e-5f * float(rng() % 4096));
    check_row("near ties", v, k, rng);
    for (int i = 0; i < n; ++i) v[i] = -std::fabs(gauss(rng));
    check_row("negative", v, k, rng);
    // Few distinct values (window spans below 256 keys: every bin is one key,
    // so the k-th key sits exactly on a bin edge), and a tied staircase.
    std::vector<float> u(60000);
    for (size_t i = 0; i < u.size(); ++i) u[i] = float((i * 7919u) % 37u);
    check_row("37 distinct values", u, k, rng);
    for (size_t i = 0; i < u.size(); ++i) u[i] = float(i / 64);
    check_row("staircase", u, k, rng);
    for (size_t i = 0; i < u.size(); ++i) u[i] = 1.0f + float((i * 40503u) % 3000u) * 1e-7f;
    check_row("3000 values in one float octave", u, k, rng);
    for (size_t i = 0; i < u.size(); ++i) {  // 200 adjacent floats: windows of a few keys, bins of one key
      const uint32_t bits = 0x3f800000u + static_cast<uint32_t>((i * 7919u) % 200u);
      std::memcpy(&u[i], &bits, 4);
    }
    check_row("200 adjacent floats", u, k, rng);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "all";
  g_lean = argc > 2 && (std::string(argv[2]) == "lean" || std::string(argv[2]) == "window");
  g_window = argc > 2 && std::string(argv[2]) == "window";
  if (which == "all" || which == "select") {
    order_key_cases();
    select_cases();
    window_cases();
  }
  if (which == "all" || which == "protocol") protocol_cases();
  std::printf("fused_select emulation: %d checks passed (%ld warp exchanges, %ld window compactions, %ld with a valid histogram)\n",
              g_checks, warp_emu::st().exchanges, g_window_compactions, g_window_from_hist);
  return 0;
}
