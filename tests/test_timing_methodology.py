"""timing.time_fn's methodology, checked without a GPU: a fake ``torch.cuda``
(events, streams, synchronize, graphs) and a fake clock record what the CUDA
path does and in which order, so the tests can assert that the L2 flush runs
outside the timed events, that the loop never synchronises, that the first
call is excluded and how reps are sized. Each test's docstring names the bug
class it guards against."""
from __future__ import annotations

import contextlib
import math
import types

import pytest
import torch

from mqa_topk_cli import timing
from mqa_topk_cli.errors import Unavailable, UsageError


class Clock:
    def __init__(self):
        self.ms = 0.0
        self.log: list = []


class FakeCuda:
    """The parts of torch.cuda that timing.py uses; every action is logged with the fake time."""

    def __init__(self, clock: Clock, l2: int = 50 << 20, capture_fails: bool = False):
        self.clock, self.l2, self.capture_fails = clock, l2, capture_fails
        c = clock
        cuda = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.t = None

            def record(self, stream=None):
                self.t = c.ms
                c.log.append(("record", id(self)))

            def elapsed_time(self, end):
                return end.t - self.t

        class Stream:
            def __init__(self, dev=None):
                pass

            def wait_stream(self, other):
                pass

        class CUDAGraph:
            def __init__(self):
                self.fn = None

            def replay(self):
                c.log.append(("replay",))
                self.fn()

        self.Event, self.Stream, self.CUDAGraph = Event, Stream, CUDAGraph
        self._graph_fn = None

        @contextlib.contextmanager
        def graph(g):
            if cuda.capture_fails:
                raise RuntimeError("operation not permitted when stream is capturing\nmore")
            c.log.append(("capture",))
            before = len(c.log)
            yield
            calls = [e for e in c.log[before:] if e[0] == "call"]
            assert len(calls) == 1
            name = calls[0][1]
            g.fn = lambda: cuda.calls_by_name[name]()
            c.log.append(("captured", name))

        self.graph = graph
        self.calls_by_name: dict = {}

    def is_available(self):
        return True

    def device(self, dev):
        return contextlib.nullcontext()

    def stream(self, s):
        return contextlib.nullcontext()

    def current_stream(self, dev=None):
        return self.Stream()

    def synchronize(self, dev=None):
        self.clock.log.append(("sync",))

    def get_device_properties(self, dev):
        return types.SimpleNamespace(L2_cache_size=self.l2, multi_processor_count=132)


class FlushBuffer:
    def __init__(self, clock, nbytes):
        self.clock, self.nbytes = clock, nbytes

    def zero_(self):
        self.clock.ms += 1000.0  # a flush takes long: it must never land inside a sample
        self.clock.log.append(("flush",))


@pytest.fixture
def fake(monkeypatch):
    clock = Clock()
    cuda = FakeCuda(clock)
    allocs = []

    def empty(n, dtype=None, device=None):
        assert dtype == torch.uint8 and torch.device(device).type == "cuda"
        allocs.append(n)
        return FlushBuffer(clock, n)

    fake_torch = types.SimpleNamespace(cuda=cuda, empty=empty, uint8=torch.uint8, device=torch.device)
    monkeypatch.setattr(timing, "torch", fake_torch)
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: clock.ms / 1e3))
    return types.SimpleNamespace(clock=clock, cuda=cuda, allocs=allocs)


def _op(clock, name, ms):
    """A path call that takes ``ms`` (each call a bit longer than the previous one)."""
    n = [0]

    def call():
        n[0] += 1
        clock.ms += ms(n[0])
        clock.log.append(("call", name))

    return call


def _timed_section(log):
    """The log from the first event record to the last one."""
    rec = [i for i, e in enumerate(log) if e[0] == "record"]
    return log[rec[0]: rec[-1] + 1], rec


def test_cold_l2_flush_is_outside_every_event_pair(fake):
    """Bug class: the L2 flush inside the timed region (every sample then
    includes the flush), or no flush before some sample."""
    fn = _op(fake.clock, "f", lambda i: float(i))
    t = timing.time_fn(fn, device="cuda", warmup=0, reps=5)
    section, rec = _timed_section(fake.clock.log)
    # per sample: flush, start record, the call, end record
    assert [e[0] for e in fake.clock.log[rec[0] - 1:]] == ["flush", "record", "call", "record"] * 5 + ["sync"]
    # the samples are the call times alone (call i takes i ms; the first call, excluded, took 1 ms)
    assert t.samples_ms == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert t.median_ms == 4.0 and t.reps == 5 and t.method == "cuda events, eager, cold L2 (2x L2 flush)"
    assert fake.allocs == [2 * (50 << 20)]


def test_the_timed_loop_never_synchronises_and_the_first_call_is_excluded(fake):
    """Bug class: a synchronize inside the timed loop (host overhead in every
    sample), or the first (compiling) call timed."""
    fn = _op(fake.clock, "f", lambda i: 100.0 if i == 1 else 1.0)
    t = timing.time_fn(fn, device="cuda", warmup=0, reps=4, cold_l2=False)
    log = fake.clock.log
    assert log[:2] == [("call", "f"), ("sync",)]  # the first call, then a synchronize
    section, _ = _timed_section(log)
    assert ("sync",) not in section and log[-1] == ("sync",)
    assert t.samples_ms == [1.0] * 4 and max(t.samples_ms) < 100.0
    assert ("flush",) not in log and t.method == "cuda events, eager, warm L2"


def test_warmup_is_budgeted_by_time_and_sizes_reps(fake):
    """Bug class: a warm-up that ignores its budget, or reps not sized from it
    (budget_ms of timed work within [min_reps, max_reps])."""
    fn = _op(fake.clock, "f", lambda i: 2.0)
    t = timing.time_fn(fn, device="cuda", warmup=10.0, reps=None, cold_l2=False, budget_ms=29.0)
    calls = sum(1 for e in fake.clock.log if e == ("call", "f"))
    assert t.reps == 15  # ceil(29 ms / 2 ms per call)
    assert calls == 1 + 5 + 15  # first call, 10 ms of warm-up, the timed calls
    fake.clock.log.clear()
    t = timing.time_fn(fn, device="cuda", warmup=10.0, reps=None, cold_l2=False, budget_ms=400.0)
    assert t.reps == 100  # 200 clamped to max_reps
    t = timing.time_fn(fn, device="cuda", warmup=10.0, reps=None, cold_l2=False, budget_ms=2.0)
    assert t.reps == 10  # 1 raised to min_reps
    t = timing.time_fn(fn, device="cuda", warmup=0.0, reps=None, cold_l2=False, budget_ms=29.0, min_reps=1)
    assert t.reps == 15  # no warm-up: one extra call sizes it


def test_warmup_synchronises_every_8_calls(fake):
    """Bug class: a warm-up that lets the host queue unboundedly far ahead."""
    fn = _op(fake.clock, "f", lambda i: 1.0)
    timing.time_fn(fn, device="cuda", warmup=20.0, reps=1, cold_l2=False)
    log = fake.clock.log
    first_record = next(i for i, e in enumerate(log) if e[0] == "record")
    warm = log[2:first_record]
    syncs = [i for i, e in enumerate(warm) if e == ("sync",)]
    calls_before = [sum(1 for e in warm[:i] if e[0] == "call") for i in syncs]
    assert calls_before == [8, 16, 20]  # every 8 calls, and once after the warm-up


def test_rotation_skips_the_flush_and_cycles_the_copies(fake):
    """Bug class: flushing on top of rotating (double cooling), or not cycling the input sets."""
    fns = [_op(fake.clock, f"r{i}", lambda n: 1.0) for i in range(3)]
    for i, f in enumerate(fns):
        fake.cuda.calls_by_name[f"r{i}"] = f
    t = timing.time_fn(lambda: None, device="cuda", warmup=0, reps=7, rotate=fns)
    section, _ = _timed_section(fake.clock.log)
    assert [e[1] for e in section if e[0] == "call"] == ["r0", "r1", "r2", "r0", "r1", "r2", "r0"]
    assert ("flush",) not in fake.clock.log and fake.allocs == []
    assert t.method == "cuda events, eager, rotating 3 input sets"


def test_graph_replay_is_what_gets_timed(fake):
    """Bug class: timing eager launches when graph replay was asked for."""
    fn = _op(fake.clock, "g", lambda i: 1.0)
    fake.cuda.calls_by_name["g"] = fn
    t = timing.time_fn(fn, device="cuda", warmup=0, reps=3)
    fake.clock.log.clear()
    t = timing.time_fn(fn, device="cuda", warmup=0, reps=3, graph=True)
    log = fake.clock.log
    assert ("capture",) in log and ("captured", "g") in log
    section, _ = _timed_section(log[log.index(("captured", "g")):])
    assert [e[0] for e in section] == ["record", "replay", "call", "record", "flush"] * 2 + ["record", "replay", "call", "record"]
    assert t.method == "cuda events, graph replay, cold L2 (2x L2 flush)"


def test_a_path_that_cannot_be_captured_is_unavailable(fake):
    """Bug class: a failed capture hidden (timing eager launches) or crashing the sweep."""
    fake.cuda.capture_fails = True
    fn = _op(fake.clock, "g", lambda i: 1.0)
    with pytest.raises(Unavailable) as ei:
        timing.time_fn(fn, device="cuda", warmup=0, reps=2, graph=True)
    assert str(ei.value) == ("CUDA graph capture failed (operation not permitted when stream is capturing); "
                             "time it with --no-graph")


def test_flush_bytes_is_twice_the_l2(fake):
    """Bug class: a flush buffer smaller than 2x L2 (inputs stay warm)."""
    assert timing.flush_bytes(torch.device("cuda")) == 100 << 20
    fake.cuda.l2 = 1
    assert timing.flush_bytes(torch.device("cuda")) == 2  # any reported L2 size counts
    fake.cuda.l2 = 0
    assert timing.flush_bytes(torch.device("cuda")) == 128 << 20
    fake.cuda.get_device_properties = lambda dev: (_ for _ in ()).throw(RuntimeError("no"))
    assert timing.flush_bytes(torch.device("cuda")) == 128 << 20


# --------------------------------------------------------------------------- CPU path and helpers

def test_cpu_timing_with_a_fake_clock(monkeypatch):
    """Bug class: timing the first call, or samples that are not per-call times."""
    clock = Clock()
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: clock.ms / 1e3))
    fn = _op(clock, "f", lambda i: 50.0 if i == 1 else float(i))
    t = timing.time_fn(fn, device="cpu", warmup=0, reps=3)
    assert t.samples_ms == pytest.approx([2.0, 3.0, 4.0], rel=1e-9) and t.method == "cpu perf_counter (no L2 flush)"
    fn = _op(clock, "f", lambda i: 4.0)
    clock.log.clear()
    t = timing.time_fn(fn, device="cpu", warmup=10.0, reps=None, budget_ms=58.0)  # 14.5 -> 15
    assert t.reps == 15 and sum(1 for e in clock.log if e == ("call", "f")) == 1 + 3 + 15
    clock.log.clear()
    t = timing.time_fn(fn, device="cpu", warmup=0.5, reps=2)  # any warm-up budget > 0 runs at least once
    assert sum(1 for e in clock.log if e == ("call", "f")) == 1 + 1 + 2
    t = timing.time_fn(fn, device="cpu", warmup=0, reps=None, budget_ms=58.0)
    assert t.reps == 15  # no warm-up: one extra call sizes it


def test_auto_reps_boundaries():
    """Bug class: reps not clamped to [min, max], or rounded down."""
    assert timing._auto_reps(4.0, 400.0, 10, 100) == 100
    assert timing._auto_reps(4.0001, 400.0, 10, 100) == 100  # ceil(99.99)
    assert timing._auto_reps(4.1, 400.0, 10, 100) == 98
    assert timing._auto_reps(40.0, 400.0, 10, 100) == 10
    assert timing._auto_reps(41.0, 400.0, 10, 100) == 10  # ceil(9.76) = 10
    assert timing._auto_reps(45.0, 400.0, 10, 100) == 10  # 9 raised to the minimum
    assert timing._auto_reps(3.0, 400.0, 10, 100) == 100  # 134 clamped
    assert timing._auto_reps(0.5, 10.0, 1, 100) == 20 and timing._auto_reps(1.0, 20.0, 1, 100) == 20  # fast calls
    assert timing._auto_reps(0.0, 400.0, 10, 100) == 100 and timing._auto_reps(-1.0, 400.0, 10, 100) == 100
    assert timing._auto_reps(math.nan, 400.0, 10, 100) == 100 and timing._auto_reps(math.inf, 400.0, 10, 100) == 100


def test_quantiles_and_summary_exact():
    """Bug class: a wrong quantile interpolation or the mean reported as the median."""
    s = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert timing.quantile(s, 0.0) == 1.0 and timing.quantile(s, 1.0) == 10.0
    assert timing.quantile(s, 0.5) == 3.0 and timing.quantile(s, 0.25) == 2.0
    assert timing.quantile(s, 0.2) == pytest.approx(1.8) and timing.quantile(s, 0.9) == pytest.approx(7.6)
    assert timing.quantile([7.0], 0.3) == 7.0 and math.isnan(timing.quantile([], 0.5))
    t = timing.summarize([10.0, 1.0, 4.0, 3.0, 2.0], "m")
    assert (t.median_ms, t.min_ms, t.mean_ms, t.reps, t.method) == (3.0, 1.0, 4.0, 5, "m")
    assert t.samples_ms == [10.0, 1.0, 4.0, 3.0, 2.0]  # in run order
    assert t.as_dict() == {"median_ms": 3.0, "p20_ms": pytest.approx(1.8), "p80_ms": pytest.approx(4.0 + 0.2 * 6.0),
                           "mean_ms": 4.0, "min_ms": 1.0, "reps": 5, "method": "m"}
    with pytest.raises(ValueError, match="no samples"):
        timing.summarize([], "m")


def test_time_fn_argument_boundaries():
    """Bug class: off-by-one argument checks (reps 1 and warm-up 0 are valid)."""
    assert timing.time_fn(lambda: None, device="cpu", reps=1, warmup=0).reps == 1
    for bad in (0, -1, True):
        with pytest.raises(UsageError, match="reps"):
            timing.time_fn(lambda: None, device="cpu", reps=bad)
    for bad in (-0.001, None):
        with pytest.raises(UsageError, match="warmup"):
            timing.time_fn(lambda: None, device="cpu", warmup=bad)
    with pytest.raises(UsageError, match="only cuda and cpu"):
        timing.time_fn(lambda: None, device="meta", reps=1)


def test_warmup_budget_is_exclusive_and_in_milliseconds(monkeypatch):
    """Bug class: a warm-up that runs one call too many at its budget, or
    measures in the wrong unit. Calls of 125 ms keep the fake clock exact
    in seconds (1/8 s), so the 250 ms budget is reached exactly."""
    for device in ("cpu", "cuda"):
        clock = Clock()
        if device == "cuda":
            cuda = FakeCuda(clock)
            fake_torch = types.SimpleNamespace(cuda=cuda, empty=lambda n, dtype=None, device=None: FlushBuffer(clock, n),
                                               uint8=torch.uint8, device=torch.device)
            monkeypatch.setattr(timing, "torch", fake_torch)
        monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: clock.ms / 1e3))
        fn = _op(clock, "f", lambda i: 125.0)
        timing.time_fn(fn, device=device, warmup=250.0, reps=1, cold_l2=False)
        assert sum(1 for e in clock.log if e == ("call", "f")) == 1 + 2 + 1, device  # 0 and 125 ms < 250 ms
        clock.log.clear()
        timing.time_fn(fn, device=device, warmup=250.25, reps=1, cold_l2=False)
        assert sum(1 for e in clock.log if e == ("call", "f")) == 1 + 3 + 1, device  # 250 ms < 250.25 ms
        clock.log.clear()
        timing.time_fn(fn, device=device, warmup=0.5, reps=1, cold_l2=False)
        assert sum(1 for e in clock.log if e == ("call", "f")) == 1 + 1 + 1, device  # any budget > 0: one warm-up call
        clock.log.clear()
        t = timing.time_fn(fn, device=device, warmup=250.0, reps=None, cold_l2=False, budget_ms=375.2, min_reps=1)
        assert t.reps == 4, device  # 2 warm-up calls of 125 ms: ceil(375.2 / 125), measured in ms (not 0.1% off)
        t = timing.time_fn(fn, device=device, warmup=0.0, reps=None, cold_l2=False, budget_ms=375.2, min_reps=1)
        assert t.reps == 4, device  # ceil(375.2 / 125): the sizing call is measured in ms (not 0.1% off)


def test_capture_failure_without_a_message(fake):
    """Bug class: a failed capture whose exception has no text crashing the report."""
    @contextlib.contextmanager
    def graph(g):
        raise RuntimeError("")
        yield  # pragma: no cover

    fake.cuda.graph = graph
    with pytest.raises(Unavailable) as ei:
        timing.time_fn(_op(fake.clock, "g", lambda i: 1.0), device="cuda", warmup=0, reps=2, graph=True)
    assert str(ei.value) == "CUDA graph capture failed (RuntimeError); time it with --no-graph"


def test_messages_are_exact(monkeypatch):
    """Bug class: garbled user-facing messages."""
    with pytest.raises(ValueError) as ei:
        timing.summarize([], "m")
    assert str(ei.value) == "summarize: no samples"
    monkeypatch.setattr(timing.torch.cuda, "is_available", lambda: False)
    with pytest.raises(Unavailable) as ei:
        timing.time_fn(lambda: None, device="cuda")
    assert str(ei.value) == ("no CUDA GPU found (needs an sm_90 Hopper GPU); use --device cpu with tiny shapes to "
                             "try the tool")


def test_default_device_and_warmup():
    """Bug class: a wrong default (device None = CUDA when available, else the CPU; warm-up 25 ms)."""
    import inspect

    if not torch.cuda.is_available():
        assert timing.time_fn(lambda: None, reps=2, warmup=0).method == "cpu perf_counter (no L2 flush)"
    assert inspect.signature(timing.time_fn).parameters["warmup"].default == 25.0


def test_the_default_timed_budget_is_400_ms(monkeypatch):
    """Bug class: the default budget of timed work (docstring: ``budget_ms`` =
    400 ms sizes ``reps`` from the warm-up) changed: 8 ms calls give exactly
    ceil(400 / 8) = 50 samples, one more with any larger budget."""
    clock = Clock()
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: clock.ms / 1e3))
    fn = _op(clock, "f", lambda i: 8.0)
    assert timing.time_fn(fn, device="cpu", warmup=16.0, reps=None).reps == 50
    assert timing.time_fn(fn, device="cpu", warmup=16.0, reps=None, budget_ms=400.5).reps == 51
