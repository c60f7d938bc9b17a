// Host-side TMA tensor-map encoding (torch-free).
//
// cuTensorMapEncodeTiled is a driver API function; we fetch it through the
// runtime's driver entry point so the extension needs no -lcuda link.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mqa_topk {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled_fn() {
  static EncodeTiledFn fn = []() -> EncodeTiledFn {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return nullptr;
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

// A row-major 2-D tensor [outer, inner] of 1-byte (fp8) or 4-byte elements;
// row pitch in bytes; the box is [box_outer, box_inner]. Out-of-bounds
// elements of a box read as zero. Returns the driver's result (0 = success;
// -1 when the driver entry point is missing).
inline int make_tensor_map_2d(CUtensorMap* map, const void* base, CUtensorMapDataType dtype, uint64_t inner,
                               uint64_t outer, uint64_t pitch_bytes, uint32_t box_inner, uint32_t box_outer,
                               CUtensorMapSwizzle swizzle) {
  EncodeTiledFn fn = encode_tiled_fn();
  if (!fn) return -1;
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {pitch_bytes};
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t elem_strides[2] = {1, 1};
  return fn(map, dtype, 2, const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// The launchers' report of make_tensor_map_2d results: 0 when every map was
// encoded, else 1000 * index of the first failing map + its CUresult (999
// for a missing driver entry point).
inline int first_map_error(const int* res, int n) {
  for (int i = 0; i < n; ++i)
    if (res[i] != 0) return i * 1000 + (res[i] < 0 ? 999 : res[i]);
  return 0;
}

}  // namespace mqa_topk
