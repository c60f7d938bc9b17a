// Development variants 12-15 of the fused kernel: the v3 kernel
// (sm90_fused_mqa_topk_v3.cuh) in its configurations; torch-free entry points
// called by fused_probes.cu (fused_mqa_topk_probe).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

int64_t fused_v3_probe_workspace_bytes(int64_t variant, int64_t topk, int sms);
cudaError_t fused_v3_probe_launch(int64_t variant, const void* q, const void* k, const float* scales,
                                  const float* weights, const int* starts, const int* ends, int* out,
                                  void* workspace, int rows, int keys, int topk, int num_sms, cudaStream_t stream,
                                  int* map_error, int probe, int target);
