"""The interface every path implements (``paths.py`` registers the built-in
ones, ``external.py`` others' kernels and a user's functions)."""
from __future__ import annotations

from typing import Callable

import torch


def _device_type(device) -> str:
    return torch.device(device).type if device is not None else "cpu"


class PathImpl:
    """One implementation of the op. Subclasses set the class attributes and
    override ``run`` (and ``logits`` when they can expose them)."""

    name: str = ""
    description: str = ""
    #: Ties at the k-th value go to the lowest key indices (SPEC §3).
    deterministic_ties: bool = False
    #: Reruns give identical output arrays. A path without it (an atomic-order
    #: top-k) may differ between runs; verify then checks every run on its own.
    deterministic_output: bool = True
    requires_cuda: bool = False

    def unavailable_reason(self, device) -> str | None:
        if self.requires_cuda and _device_type(device) != "cuda":
            return f"{self.name}: needs a CUDA GPU (device is {device})"
        return None

    def run(self, w, output: torch.Tensor) -> None:
        raise NotImplementedError

    def logits(self, w) -> torch.Tensor | None:
        return None

    def prepare_logits(self, w) -> Callable[[], object] | None:
        """A closure timing the path's logits op alone (``bench --op logits``);
        None: bench's own way for this path."""
        return None

    def prepare_topk(self, w, logits: torch.Tensor, output: torch.Tensor) -> Callable[[], object] | None:
        """A closure timing the path's top-k op alone on ``logits`` into
        ``output`` (``bench --op topk``); None: bench's own way for this path."""
        return None

    def new_output(self, w) -> torch.Tensor:
        return torch.empty((w.rows, int(w.topk)), dtype=torch.int32, device=w.device)

    def prepare(self, w) -> Callable[[], None]:
        """A zero-argument closure running the path on ``w`` into an output
        buffer allocated here (the buffer is ``closure.output``)."""
        out = self.new_output(w)

        def fn() -> None:
            self.run(w, out)

        fn.output = out  # type: ignore[attr-defined]
        return fn

    def __repr__(self) -> str:
        return f"<path {self.name}>"
