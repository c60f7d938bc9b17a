"""mqa-topk: build, validate and benchmark fused and dense FP8 MQA-logits +
top-k prefill kernels (the DeepSeek-V3.2 sparse-attention indexer) on Hopper."""

__version__ = "0.1.0"
