"""`mqa-topk`: build, verify, bench, crossover, inspect.

Thin on purpose: parsing, progress and printing. The work lives in modules a
Python user can call directly (bench, crossover, verify, workloads, jit,
eligibility).

Errors: a bad input gives one line naming the option or file and exit code 2
(click usage errors, ``UsageError``, ``ContractError``); an unavailable path
or a failed verification gives one line and exit code 1. Tracebacks only for
unexpected exceptions, and only with ``--debug``.
"""
from __future__ import annotations

import math
import os
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import click

from . import __version__, checks
from .models import MODEL_NAMES, models_help
from .errors import ContractError, MqaTopkError, Unavailable, UsageError, VerificationFailed, path_unavailable

PROG = "mqa-topk"
_NO_GPU = "no CUDA GPU found (needs an sm_90 Hopper GPU); use --device cpu with tiny shapes to try the tool"
_state = {"debug": False}


# ------------------------------------------------------------ error handling


class _ToolError(click.ClickException):
    """One of our errors, already formatted, with its exit code."""

    def __init__(self, message: str, exit_code: int, where: str):
        super().__init__(message)
        self.exit_code = exit_code
        self.where = where


def _exit_code(e: MqaTopkError) -> int:
    return 2 if isinstance(e, (UsageError, ContractError)) else 1


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return " ".join(lines) if len(lines) <= 3 else lines[0]


class _Group(click.Group):
    """A click group whose errors are one line on stderr (no usage block)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except MqaTopkError as e:
            if _state["debug"]:
                traceback.print_exc()
            raise _ToolError(_one_line(str(e)), _exit_code(e), _where(ctx)) from e
        except KeyboardInterrupt:
            raise click.exceptions.Abort() from None
        except Exception as e:  # unexpected: a bug or an environment problem
            if _state["debug"]:
                raise
            msg = _one_line(f"{type(e).__name__}: {e}")
            raise _ToolError(f"unexpected error: {msg} (rerun with --debug for the traceback)", 1, _where(ctx)) from e

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        _state["debug"] = False
        try:
            try:
                rv = super().main(args=args, prog_name=prog_name or PROG, complete_var=complete_var,
                                  standalone_mode=False, **extra)
            finally:  # output files created up front (checks.probe_output_file) that nothing wrote
                checks.discard_unwritten_outputs()
        except click.exceptions.NoArgsIsHelpError as e:
            e.show()
            rv = 2
        except _ToolError as e:
            click.echo(f"{e.where}: {e.format_message()}", err=True)
            rv = e.exit_code
        except click.ClickException as e:
            where = getattr(getattr(e, "ctx", None), "command_path", None) or PROG
            click.echo(f"{where}: {_one_line(e.format_message())}", err=True)
            rv = e.exit_code
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            rv = 1
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


def _where(ctx: click.Context) -> str:
    sub = getattr(ctx, "invoked_subcommand", None)
    return f"{ctx.command_path} {sub}" if sub else ctx.command_path


# ------------------------------------------------------------ output helpers


def _console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    # markup off: table cells hold error text such as "[enforce fail at ...]"; styles are set with Text
    return Console(file=stream, width=None if tty else 200, highlight=False, soft_wrap=False, markup=False)


def _is_tty(stream) -> bool:
    return bool(getattr(stream, "isatty", None) and stream.isatty())


@contextmanager
def _progress(description: str):
    """A rich progress bar on stderr when it is a terminal, and one line per
    finished step on stdout when stdout is not (a log or a pipe); yields a
    callback(done, total, label)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = _console(stderr=True)
    lines = not _is_tty(sys.stdout)
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description}", markup=False, style="bold"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[label]}", markup=False), console=console,
                  transient=console.is_terminal, disable=not console.is_terminal) as prog:
        task = prog.add_task(description, total=None, label="")

        def update(done: int, total: int, label: str) -> None:
            prog.update(task, completed=done, total=total, label=label)
            if lines:
                click.echo(f"[{done}/{total} {time.perf_counter() - t0:.1f} s] {description}: {label}")

        yield update


def _fmt(v, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "-"
        return f"{v:.{digits}f}"
    return str(v)


def _status_style(status: str):
    """The status as a styled cell (a Text: brackets in it are shown as they are)."""
    from rich.text import Text

    if status == "ok" or status == "pass":
        return Text(status, style="green")
    if status.startswith("unavailable"):
        return Text(status, style="yellow")
    return Text(status, style="red")


def _note(text: str) -> None:
    """A note before the work starts (stderr, so a redirected table stays clean)."""
    click.echo(f"note: {text}", err=True)


_SMALL = "--rows 16 --keys 1024 --topk 512"


#: Rows x keys above which a case is sized for a GPU: on a CPU it takes long, and a note says so.
_GPU_SIZED_PAIRS = 1 << 24


def _cpu_notes(device: str, *, graph: bool = False, cases: list | None = None, what: str = "the default cases",
               hint: str = "") -> None:
    """Up-front notes for a run on the CPU: --graph does nothing there; when
    one of ``cases`` (dicts with rows and keys; ``what`` names them) is sized
    for a GPU (more than _GPU_SIZED_PAIRS rows x keys), a note says so and
    ``hint`` says how to pick small ones."""
    if not device.startswith("cpu"):
        return
    if graph:
        _note("--graph does nothing on a CPU (CUDA-graph replay needs a GPU); the calls are timed eagerly")
    sizes = [(int(c.get("rows") or 0), int(c.get("keys") or 0)) for c in cases or []]
    if any(r * k > _GPU_SIZED_PAIRS for r, k in sizes):
        rows, keys = max(r for r, _ in sizes), max(k for _, k in sizes)
        one = len(sizes) == 1
        _note(f"{what} {'is' if one else 'are'} sized for a GPU ({'' if one else 'up to '}{rows} rows, "
              f"{'' if one else 'up to '}{keys} keys); on a CPU {'it takes' if one else 'they take'} a long time: "
              f"{hint}")


# ------------------------------------------------------------ option validation


def _v_paths(ctx, param, value):
    if value is None:
        return None
    from . import paths as paths_mod

    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise click.BadParameter("name at least one path", ctx=ctx, param=param)
    for n in names:
        try:
            paths_mod.get_path(n)  # built-in, external (external.py) or py:MODULE:FUNCTION; imports nothing
        except UsageError as e:
            msg = str(e) if n.startswith("py:") else (f"unknown path {n!r} (choose from "
                                                      f"{', '.join(paths_mod.all_path_names())}, or py:MODULE:FUNCTION[@KIND])")
            raise click.BadParameter(msg, ctx=ctx, param=param) from None
    return list(dict.fromkeys(names))


def _v_path_name(ctx, param, value):
    if value is None:
        return None
    names = _v_paths(ctx, param, value)
    if len(names) != 1:
        raise click.BadParameter("name one path", ctx=ctx, param=param)
    return names[0]


def _v_number(lo: float, hi: float, lo_open: bool = False):
    """A click callback: a finite float in [lo, hi] (``(lo, hi]``): NaN and inf are refused."""

    def check(ctx, param, value):
        if value is None:
            return None
        return checks.check_number(value, param.opts[0], lo=lo, hi=hi, lo_open=lo_open)

    return check


def _v_device(ctx, param, value):
    if value is None:
        return None
    v = value.strip().lower()
    if v in ("auto",):
        return v
    if v == "cpu" or v == "cuda" or (v.startswith("cuda:") and v[5:].isdigit()):
        return v
    raise click.BadParameter(f"{value!r} is not a device (cpu, cuda or cuda:N)", ctx=ctx, param=param)


def _v_file(suffixes: tuple[str, ...]):
    """A click callback for an output file, checked before the work by
    creating it (``checks.probe_output_file``); it is written when the run has
    finished, and removed again if the run fails or is interrupted first."""

    def check(ctx, param, value):
        if value is None:
            return None
        checks.probe_output_file(value, param.opts[0], suffixes)
        return value

    return check


_v_out = _v_file(checks.TABLE_SUFFIXES)


def _v_int_list_upto(maximum: int, what: str):
    """``_v_int_list`` whose values must also stay <= ``maximum``."""

    def check(ctx, param, value):
        out = _v_int_list(ctx, param, value)
        for n in out or []:
            if n > maximum:
                raise click.BadParameter(f"{n} exceeds the {what} {maximum}", ctx=ctx, param=param)
        return out

    return check


def _v_int_list(ctx, param, value):
    if value is None:
        return None
    out = []
    for tok in value.split(","):
        tok = tok.strip()
        if not tok:
            continue
        try:
            n = int(tok)
        except ValueError:
            raise click.BadParameter(f"{tok!r} is not an integer", ctx=ctx, param=param) from None
        if n <= 0:
            raise click.BadParameter(f"{n} must be positive", ctx=ctx, param=param)
        out.append(n)
    if not out:
        raise click.BadParameter("give at least one value", ctx=ctx, param=param)
    return out


def _v_topk_list(ctx, param, value):
    out = _v_int_list(ctx, param, value)
    if out is None:
        return None
    for t in out:
        if t not in (512, 1024, 2048):
            raise click.BadParameter(f"{t} is not one of 512, 1024, 2048", ctx=ctx, param=param)
    return out


def _resolve_device(device: str | None, *, default: str) -> str:
    """'auto' -> cuda when available, else cpu; cuda without a GPU -> Unavailable."""
    import torch

    d = device or default
    if d == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if d.startswith("cuda") and not torch.cuda.is_available():
        raise Unavailable(_NO_GPU)
    if d.startswith("cuda:") and int(d[5:]) >= torch.cuda.device_count():
        raise UsageError(f"--device {d}: no such GPU (this machine has {torch.cuda.device_count()}: "
                         f"cuda:0..cuda:{torch.cuda.device_count() - 1})")
    return d


def _config_file(name: str, option: str = "--config") -> Path:
    from .resources import config_path

    try:
        return config_path(name)
    except FileNotFoundError:
        raise UsageError(f"{option} {name}: no such file or shipped preset") from None


def shape_options(f):
    """--rows --keys --topk --layout --dist --seed (all optional)."""
    opts = [
        click.option("--rows", type=click.IntRange(min=1, max=checks.MAX_ROWS_ANY_HEADS), default=None,
                     help=f"Query rows of one case (at most 2^31 / heads - 1: {checks.MAX_ROWS} at 32 heads)."),
        click.option("--keys", type=click.IntRange(min=1, max=checks.MAX_KEYS), default=None,
                     help="Keys (context length) of one case, at most the key limit (MAX_KEYS)."),
        click.option("--topk", type=click.Choice(["512", "1024", "2048"]), default=None, help="Top-k."),
        click.option("--layout", type=click.Choice(checks.LAYOUTS), default=None, help="Workload layout."),
        click.option("--dist", type=click.Choice(checks.DISTS), default=None, metavar="NAME",
                     help=f"Score distribution of the generated inputs: {', '.join(checks.DISTS)} "
                          f"(mqa_topk_cli.workloads.DISTS says what each provokes)."),
        click.option("--seed", type=click.IntRange(min=0, max=checks.MAX_SEED), default=None,
                     help="Random seed of every generated case (the default cases, --config's, or the one the shape "
                          "flags build); alone, it reseeds the default cases."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def model_options(f):
    """--model NAME --heads N (both optional)."""
    opts = [
        click.option("--model", type=click.Choice(MODEL_NAMES, case_sensitive=False), default=None,
                     help=f"Model preset: its indexer heads for every generated case, and its topk for the one "
                          f"case that shape flags (or the default) build: {models_help()}."),
        click.option("--heads", type=click.Choice([str(h) for h in checks.SUPPORTED_HEADS]), default=None,
                     help=f"Indexer heads of every generated case (q [rows, heads, 128], weights [rows, heads]); "
                          f"overrides --model's [default: {checks.DEFAULT_HEADS}, or the model's]. Recorded "
                          f"workload files keep the heads of their tensors."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _model_heads(model: str | None, heads: str | None):
    """(the --model preset or None, the heads every generated case takes or
    None: --heads, else the model's)."""
    from .models import get_model

    m = get_model(model) if model else None
    h = int(heads) if heads is not None else (m.heads if m else None)
    return m, h


def _heads_apply(option: str, cases: list[dict], generated: bool) -> None:
    """A heads option with nothing generated to apply to (only --workload
    files, whose heads come from their tensors) is a usage error."""
    if not generated and all("file" in c for c in cases):
        raise UsageError(f"{option}: sets the heads of generated cases, and the --workload files are recorded "
                         f"ones (their heads come from their tensors); give --config or shape flags too, or leave "
                         f"out {option}")


def timing_options(f):
    opts = [
        click.option("--reps", type=click.IntRange(min=1, max=checks.MAX_REPS), default=None,
                     help="Timed runs per measurement [default: auto, ~0.4 s of work, 10..100]."),
        click.option("--warmup", type=float, default=25.0, show_default=True,
                     callback=_v_number(0.0, checks.MAX_WARMUP_MS),
                     help=f"Warm-up budget in ms (after the excluded first call), 0..{checks.MAX_WARMUP_MS:g}."),
        click.option("--cold-l2/--warm-l2", default=True, show_default=True,
                     help="Flush a 2x-L2 buffer before every timed run."),
        click.option("--graph/--no-graph", default=False, show_default=True,
                     help="Time CUDA-graph replays (GPU only: does nothing on a CPU)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _case_from_flags(base: dict, rows, keys, topk, layout, dist, seed, heads=None) -> dict:
    from .workloads import heads_suffix

    case = dict(base)
    for k, v in (("rows", rows), ("keys", keys), ("topk", int(topk) if topk else None), ("layout", layout),
                 ("dist", dist), ("seed", seed), ("heads", heads)):
        if v is not None:
            case[k] = v
    case["name"] = (f"{case['layout']}-{case['dist']}-r{case['rows']}-k{case['keys']}-t{case['topk']}"
                    f"{heads_suffix(case.get('heads', checks.DEFAULT_HEADS))}")
    return case


def _select_cases(config: str, names: tuple[str, ...]) -> list[dict]:
    """The cases of ``config`` (those named by --case), every field and every
    recorded file they name checked before the first one runs."""
    from .workloads import check_case_files, load_workload_config

    path = _config_file(config)
    cases = load_workload_config(path)
    if names:
        known = [str(c.get("name")) for c in cases]
        missing = [n for n in names if n not in known]
        if missing:
            raise UsageError(f"--case {missing[0]}: not in {path.name} (cases: {', '.join(known)})")
        cases = [c for c in cases if str(c.get("name")) in names]
    check_case_files(path, cases)
    return cases


def _reseed(cases: list[dict], seed: int | None, generated: bool) -> list[dict]:
    """``cases`` with every generated one's seed set to ``seed`` (--seed);
    ``generated``: the command also builds a case from the shape flags. A
    --seed with nothing generated to seed is a usage error."""
    if seed is None:
        return cases
    if not generated and all("file" in c for c in cases):
        raise UsageError("--seed: seeds generated cases, and the --workload files are recorded ones; give --config "
                         "or shape flags too, or leave out --seed")
    return [c if "file" in c else dict(c, seed=seed) for c in cases]


def _write_out(out, records, env, extra=None, option: str = "--out") -> None:
    from .bench import write_results

    p = write_results(out, records, env, extra=extra, option=option)
    click.echo(f"wrote {p}")


# ------------------------------------------------------------ the group


@click.group(name=PROG, cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name=PROG, message="%(prog)s %(version)s")
@click.option("--debug", is_flag=True, help="Show tracebacks of unexpected errors.")
def main(debug: bool) -> None:
    """Build, verify and benchmark the fused and dense FP8 MQA-logits + top-k
    prefill kernels (DeepSeek-V3.2 indexer) on Hopper, and find where the fused
    path wins."""
    _state["debug"] = debug


# ------------------------------------------------------------ build


def _ninja_version() -> str | None:
    """``ninja --version`` (the binary or the pip package), or None."""
    import shutil
    import subprocess

    exe = shutil.which("ninja")
    if exe is None:
        try:
            import ninja  # the pip package ships the binary

            exe = str(Path(ninja.BIN_DIR) / "ninja")
        except Exception:
            return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=5, check=False)
    except Exception:
        return None
    return f"{exe} ({out.stdout.strip()})" if out.returncode == 0 and out.stdout.strip() else None


@main.command()
@click.option("--verbose", is_flag=True, help="Verbose build: ptxas -v and -lineinfo (MQA_TOPK_VERBOSE_BUILD=1).")
@click.option("--force", is_flag=True, help="Rebuild even if the cache holds a build of these sources.")
def build(verbose: bool, force: bool) -> None:
    """Build (or load from the cache) the CUDA extension for sm_90a and report
    registers, shared memory and spills of each kernel."""
    checks.check_environment()  # the environment variables, before any work
    from rich.table import Table
    from rich.text import Text

    from . import jit

    if verbose:
        os.environ["MQA_TOPK_VERBOSE_BUILD"] = "1"
    con = _console()
    rep = jit.toolchain_report()
    t = Table(title="mqa-topk build: toolchain", show_header=False)
    t.add_column("item", style="bold")
    t.add_column("value")
    t.add_row("GPU", f"{rep.get('gpu') or 'none'}" + (f" ({rep.get('sms')} SMs)" if rep.get("sms") else ""))
    t.add_row("arch", str(rep.get("arch") or "-") + (f"  (target {rep['target']})" if rep.get("target") else ""))
    t.add_row("nvcc", f"{rep.get('nvcc') or 'not found'}" + (f"  ({rep['nvcc_version']})" if rep.get("nvcc_version") else ""))
    t.add_row("ninja", _ninja_version() or ("found" if rep.get("ninja") else "not found"))
    t.add_row("torch CUDA", str(rep.get("torch_cuda") or "none (CPU build of torch)"))
    t.add_row("cache dir", str(rep.get("cache_dir")))
    srcs = rep.get("sources") or []
    t.add_row("sources", "\n".join(srcs) if srcs else "(none found)")
    con.print(t)
    missing = list(rep.get("missing") or [])
    if missing:
        raise Unavailable("cannot build here: " + "; ".join(missing))
    click.echo("building ..." if force else "building (or loading from the cache) ...")
    jit.load_extension(verbose=verbose, force=force)
    br = jit.build_report()
    secs = br.get("build_seconds")
    click.echo(f"built for {br.get('arch')} in {_fmt(secs, 1)} s; cache {br.get('cache_dir')}")
    if br.get("ops") is not None:
        click.echo(f"ops: {', '.join(br.get('ops') or []) or '(none)'}")
    ws = br.get("fused_workspace_bytes")
    if ws:
        click.echo("fused workspace (any rows/keys): "
                   + ", ".join(f"topk {t}: {b / 2**20:.1f} MiB" for t, b in sorted(ws.items())))
    calls = br.get("fused_call_bytes")
    if calls:
        from .ops import FUSED_CALL_BYTES_CAP

        ct = Table(title=f"fused call: kernel and bytes beyond the workspace (top-2048; cap "
                         f"{FUSED_CALL_BYTES_CAP >> 20} MiB)")
        keys_cols = sorted({n for _, n in calls})
        ct.add_column("rows", justify="right")
        for n in keys_cols:
            ct.add_column(f"{n // 1024}K keys", justify="right")
        for r in sorted({r for r, _ in calls}):
            cells = []
            for n in keys_cols:
                kb = calls.get((r, n))
                cells.append("-" if kb is None else f"{kb[0]} {kb[1] / 2**20:.0f} MiB")
            ct.add_row(str(r), *cells)
        con.print(ct)
    kt = Table(title="kernels")
    for col in ("kernel", "registers", "shared bytes", "local (spill) bytes", "max threads"):
        kt.add_column(col, justify="left" if col == "kernel" else "right")
    for k in br.get("kernels") or []:
        local = k.get("local_bytes")
        kt.add_row(str(k.get("name")), _fmt(k.get("registers")), _fmt(k.get("shared_bytes")),
                   (Text(str(local), style="red") if local else _fmt(local)), _fmt(k.get("max_threads")))
    con.print(kt)


# ------------------------------------------------------------ bench


def _bench_table(results, op: str):
    from rich.table import Table

    t = Table(title=f"mqa-topk bench ({op})")
    cols = ["case", "path", "rows", "keys", "heads", "topk", "median ms", "p20 ms", "p80 ms",
            "G logits/s" if op == "topk" else "TFLOP/s", "speedup", "status"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("case", "path", "status") else "right")
    for r in results:
        rate = r.g_logits_per_s if op == "topk" else r.tflops
        sp = f"{r.speedup:.2f}x vs {r.baseline}" if r.baseline and math.isfinite(r.speedup) else "-"
        t.add_row(r.case, r.path, str(r.rows or "-"), str(r.keys or "-"), str(getattr(r, "heads", "") or "-"),
                  str(r.topk or "-"), _fmt(r.median_ms),
                  _fmt(r.p20_ms), _fmt(r.p80_ms), _fmt(rate, 1), sp, _status_style(r.status))
    return t


@main.command()
@shape_options
@click.option("--paths", "paths_", default=None, callback=_v_paths,
              help="Comma list of paths [default: native,torch, plus fused when available]; also engine-fused, "
                   "engine-dense, deepgemm, flashinfer-topk, py:MODULE:FUNCTION[@KIND].")
@click.option("--config", default=None, help="Sweep config (file or shipped preset, e.g. 'bench') [default: the headline case].")
@click.option("--case", "case_names", multiple=True, help="Only these cases of --config (repeatable).")
@click.option("--workload", "workload_files", multiple=True, type=click.Path(dir_okay=False),
              help="A recorded workload file to time (repeatable; with or without --config or shape flags).")
@click.option("--op", type=click.Choice(["mqa_topk", "logits", "topk"]), default="mqa_topk", show_default=True,
              help="What to time: the whole op, the logits alone (with the fp8 GEMM ceiling), or the top-k alone.")
@click.option("--random-logits", is_flag=True, help="--op topk: time on random logits instead of the workload's.")
@model_options
@click.option("--device", default=None, callback=_v_device, help="cuda, cuda:N or cpu (tiny shapes) [default: cuda].")
@timing_options
@click.option("--out", default=None, callback=_v_out, help="Write results to FILE.csv or FILE.json (environment stamped in).")
def bench(rows, keys, topk, layout, dist, seed, paths_, config, case_names, workload_files, op, random_logits, model,
          heads, device, reps, warmup, cold_l2, graph, out) -> None:
    """Time paths on the headline case (default: 32 heads, top-2048), a
    one-case shape given by flags, a model preset (--model), a sweep config,
    or recorded workload files; report median/p20/p80 ms, effective TFLOP/s
    (2 x heads x 128 FLOP per visible pair) and the speedup over the dense
    path."""
    checks.check_environment()  # the environment variables, before any work
    from . import bench as bench_mod
    from . import workloads
    from .envinfo import device_label, environment

    # the inputs first (exit 2), then what this machine can run (exit 1)
    flags = any(v is not None for v in (rows, keys, topk, layout, dist))
    if config and flags:
        raise UsageError("--config: give either a config or the shape flags (--rows/--keys/--topk/--layout/--dist)")
    if case_names and not config:
        raise UsageError("--case: only with --config")
    if random_logits and op != "topk":
        raise UsageError("--random-logits: only with --op topk")
    m, heads_ = _model_heads(model, heads)
    cases = workloads.with_heads(_select_cases(config, case_names) if config else [], heads_)
    cases += workloads.file_cases(workload_files)
    case = None  # the case the shape flags build (the headline when nothing else is given)
    if flags or not (config or workload_files):
        topk_ = topk or (m.topk if m else None)
        case = _case_from_flags(bench_mod.HEADLINE, rows, keys, topk_, layout, dist, seed, heads_)
        if not flags and case["topk"] == bench_mod.HEADLINE["topk"]:
            case["name"] = workloads.name_with_heads("headline", case["heads"])
        workloads.check_case(case)
    cases = _reseed(cases, seed, generated=case is not None)
    if heads_ is not None:
        _heads_apply("--heads" if heads else "--model", cases, generated=case is not None)
    bench_mod.check_external_paths(paths_ or [], device or "cuda")  # one that cannot run here: one line, exit 1
    dev = _resolve_device(device, default="cuda")
    if config:
        _cpu_notes(dev, cases=[c for c in cases if "file" not in c], what=f"the cases of --config {config}",
                   hint=f"pick small ones with --case NAME, or give shape flags instead of --config, e.g. {_SMALL}")
    if case is not None:
        workloads.check_case(case, dev)  # too big for the memory: a usage error, exit 2 (before the note)
        _cpu_notes(dev, cases=[case], what="the headline case" if not flags else "the case of the shape flags "
                   "(unset ones take the headline's values)", hint=f"give small shape flags, e.g. {_SMALL}")
        cases.append(workloads.workload_from_case(case, dev))  # too big for the memory: a usage error, exit 2
    if paths_ is None:
        paths_ = ["native", "torch"]
        if op == "mqa_topk":
            from .eligibility import fused_mqa_topk_available

            if dev.startswith("cuda") and fused_mqa_topk_available():
                paths_ = ["fused"] + paths_
    _cpu_notes(dev, graph=graph)
    with _progress(f"bench {op}") as prog:
        results = bench_mod.run_bench(cases, paths_, device=dev, reps=reps, warmup=warmup, cold_l2=cold_l2,
                                      graph=graph, progress=prog, op=op, random_logits=random_logits)
    con = _console()
    con.print(_bench_table(results, op))
    if op == "logits":
        ceil = next((r for r in results if r.op == "gemm"), None)
        if ceil is not None and ceil.ok:
            best = max((r.tflops for r in results if r.op == "logits" and r.ok and r.path == "native"), default=None)
            frac = f"; native logits reach {100 * best / ceil.tflops:.0f}% of it" if best else ""
            click.echo(f"fp8 GEMM ceiling (torch._scaled_mm 8192^3, e4m3 -> bf16), this run: {ceil.tflops:.1f} TFLOP/s{frac}")
        elif ceil is not None:
            click.echo(f"fp8 GEMM ceiling: {ceil.status}")
    env = environment(dev)
    click.echo(f"{device_label(env, dev)} | torch {env.get('torch')} | CUDA {env.get('cuda') or '-'} | "
               f"commit {env.get('commit') or '-'} | {next((r.method for r in results if r.ok), '')}".rstrip(" |"))
    if out:
        _write_out(out, results, env)
    timed = [r for r in results if r.op != "gemm"]
    if timed and not any(r.ok for r in timed):
        raise Unavailable("no path could be timed (see the status column)")


# ------------------------------------------------------------ verify


def _default_verify_paths(device: str) -> list[str]:
    """Every native kernel path that can run here (fused, native), else torch."""
    from . import paths as paths_mod

    names = []
    for n in ("fused", "native"):
        try:
            if paths_mod.get_path(n).unavailable_reason(device) is None:
                names.append(n)
        except Exception:
            pass
    return names or ["torch"]


def _verify_rows(results) -> list[dict]:
    from .bench import as_records

    return as_records(results)


@main.command()
@click.option("--paths", "paths_", default=None, callback=_v_paths,
              help="Comma list of paths to verify [default: fused and native where available, else torch].")
@click.option("--config", default=None, help="Workload config (file or shipped preset) [default: verify].")
@click.option("--case", "case_names", multiple=True, help="Only these cases of the config (repeatable).")
@click.option("--workload", "workload_files", multiple=True, type=click.Path(dir_okay=False),
              help="A recorded workload file (repeatable).")
@shape_options
@model_options
@click.option("--other", default=None, callback=_v_path_name, help="Also compare index sets with this path (diagnostic).")
@click.option("--reruns", type=click.IntRange(min=0, max=checks.MAX_RERUNS), default=2, show_default=True,
              help="Reruns for the determinism check.")
@click.option("--precision", type=click.Choice(["fp32", "fp64"]), default="fp32", show_default=True,
              help="Precision of the reference logits.")
@click.option("--tol-rel", type=float, default=None, callback=_v_number(0.0, checks.MAX_TOL_REL, lo_open=True),
              help="Relative tolerance of the optimality check, in (0, 2^-4] "
                   "[default: verify.DEFAULT_TOL_REL = 2^-12].")
@click.option("--device", default=None, callback=_v_device, help="cuda, cuda:N, cpu or auto [default: auto].")
@click.option("--out", default=None, callback=_v_out, help="Write results to FILE.csv or FILE.json.")
def verify(paths_, config, case_names, workload_files, rows, keys, topk, layout, dist, seed, model, heads, other,
           reruns, precision, tol_rel, device, out) -> None:
    """Check paths against the reference, layer by layer (validity, tie-aware
    optimality, exact-set diagnostic, determinism, inputs unchanged). Exit 1 on
    any failure. --model / --heads run the cases at a model's heads (the
    config's cases keep their topk)."""
    checks.check_environment()  # the environment variables, before any work
    from rich.table import Table

    from . import paths as paths_mod
    from . import verify as verify_mod
    from . import workloads
    from .envinfo import environment

    # the inputs first (exit 2), then what this machine can run (exit 1)
    flags = any(v is not None for v in (rows, keys, topk, layout, dist))  # (--seed reseeds, as in bench)
    if case_names and (workload_files or flags) and not config:
        raise UsageError("--case: selects cases of --config; give --config too")
    m, heads_ = _model_heads(model, heads)
    cases = []
    if config or not (workload_files or flags):
        cases = workloads.with_heads(_select_cases(config or "verify", case_names), heads_)
    cases = _reseed(cases, seed, generated=flags)
    file_cases = workloads.file_cases(workload_files)
    if heads_ is not None:
        _heads_apply("--heads" if heads else "--model", cases + file_cases, generated=flags)
    flag_case = None
    if flags:
        base = {"name": "flags", "layout": "causal", "rows": 64, "keys": 4096, "topk": 512, "dist": "gaussian",
                "seed": 0}
        flag_case = _case_from_flags(base, rows, keys, topk or (m.topk if m else None), layout, dist, seed, heads_)
        workloads.check_case(flag_case)  # bad flags: one line, exit 2
    dev = _resolve_device(device, default="auto")
    sources: list = []  # (label, zero-arg builder, case dict (labels a failure), workload file or None)
    _cpu_notes(dev, cases=[c for c in cases if "file" not in c],
               what=f"the cases of --config {config}" if config else "the default cases",
               hint=f"pick small ones with --case NAME, or give shape flags, e.g. {_SMALL}")
    for c in cases:
        sources.append((str(c.get("name")), lambda c=c: workloads.workload_from_case(c, dev), c, c.get("file")))
    for c in file_cases:
        f = c["file"]
        sources.append((c["name"], lambda f=f: workloads.load_workload(f, device=dev), {}, f))
    if flag_case is not None:
        w = workloads.workload_from_case(flag_case, dev)  # too big for the memory: one line, exit 2
        sources.append((flag_case["name"], lambda w=w: w, flag_case, None))
    names = paths_ or _default_verify_paths(dev)
    for n in names + ([other] if other else []):
        reason = paths_mod.get_path(n).unavailable_reason(dev)
        if reason:
            raise path_unavailable(n, dev, reason)

    results = []
    total = len(sources) * len(names)
    done = 0
    with _progress("verify") as prog:
        for label, make, info, file in sources:
            try:
                w = make()
            except Exception as e:  # labelled, and the other cases go on (as in bench)
                for n in names:
                    results.append(verify_mod.failed_case(label, n, e, rows=info.get("rows"), keys=info.get("keys"),
                                                          topk=info.get("topk"), file=file,
                                                          heads=info.get("heads")))
                    done += 1
                    prog(done, total, f"{label} / {n}: FAIL ({results[-1].status})")
                continue
            ref_cache: dict = {}  # the reference logits, shared by the paths of this workload
            for n in names:
                r = verify_mod.verify_case(w, n, other=other, reruns=reruns, precision=precision, tol_rel=tol_rel,
                                           ref_cache=ref_cache)
                if getattr(r, "case", None) in (None, ""):
                    try:
                        r.case = label
                    except Exception:
                        pass
                r.file = file
                results.append(r)
                done += 1
                prog(done, total, f"{label} / {n}: {'pass' if r.passed else 'FAIL'}")
            del w, ref_cache
    t = Table(title="mqa-topk verify")
    files = any(r.file for r in results)  # name the recorded workload files when there are any
    for c in ("case", "path", *(("file",) if files else ()), "rows", "keys", "heads", "topk", "valid rows",
              "tie-equiv rows",
              "exact-set rate", "max violation", "deterministic", "result"):
        t.add_column(c, justify="left" if c in ("case", "path", "file", "result") else "right")
    for r in results:
        rate = r.exact_set_rate
        ran = r.status == "ok"  # else the checks did not run: "-", and the reason is printed below the table
        t.add_row(str(r.case), str(r.path), *((r.file or "-",) if files else ()), str(r.rows or "-"),
                  str(r.keys or "-"), str(r.heads or "-"), str(r.topk or "-"), f"{r.valid_rows}/{r.rows}" if ran else "-",
                  str(r.tie_equivalent_rows) if ran else "-", _fmt(rate, 4) if rate is not None else "-",
                  (f"{r.max_violation:.3g}" if isinstance(r.max_violation, float) else _fmt(r.max_violation))
                  if ran else "-", _fmt(r.deterministic) if ran else "-", _status_style("pass" if r.passed else "FAIL"))
    con = _console()
    con.print(t)
    failed = [r for r in results if not r.passed]
    for r in failed:
        for err in list(r.errors)[:3]:
            click.echo(f"{r.case} / {r.path}: {err}")
    if out:
        _write_out(out, _verify_rows(results), environment(dev))
    if failed:
        raise VerificationFailed(f"{len(failed)} of {len(results)} checks failed")
    click.echo(f"all {len(results)} checks passed")


# ------------------------------------------------------------ crossover


@main.command()
@click.option("--config", default="crossover", show_default=True, help="Sweep config (file or shipped preset).")
@click.option("--paths", "paths_", default=None, callback=_v_paths,
              help="Two paths A,B: where A starts to beat B [default: the config's, fused,native].")
@click.option("--topks", default=None, callback=_v_topk_list, help="Comma list of topks (overrides the config).")
@click.option("--rows", "rows_list", default=None, callback=_v_int_list_upto(checks.MAX_ROWS_ANY_HEADS, "row limit"),
              help="Comma list of row counts (overrides).")
@click.option("--keys", "keys_list", default=None, callback=_v_int_list_upto(checks.MAX_KEYS, "key limit"),
              help=f"Comma list of key counts, each at most the key limit {checks.MAX_KEYS} (overrides the grid).")
@click.option("--confirm", type=click.IntRange(min=0, max=checks.MAX_CONFIRM), default=None,
              help=f"A must also win at this many following grid points, 0..{checks.MAX_CONFIRM} "
                   f"[default: the config's, 2].")
@click.option("--block-rows", type=click.IntRange(min=1, max=checks.MAX_BLOCK_ROWS), default=None,
              help=f"Rows per fused block for the wave rule, 1..{checks.MAX_BLOCK_ROWS} [default: the calibration's, 8].")
@click.option("--sms", type=click.IntRange(min=1, max=checks.MAX_SMS), default=None,
              help=f"SM count for the wave rule, 1..{checks.MAX_SMS} [default: the GPU's].")
@click.option("--wave/--no-wave", default=True, show_default=True, help="Measure the wave-rule table.")
@click.option("--wave-keys", type=click.IntRange(min=1, max=checks.MAX_KEYS), default=None,
              help="Key count of the wave table [default: config].")
@click.option("--wave-topk", type=click.Choice(["512", "1024", "2048"]), default=None, help="Top-k of the wave table.")
@click.option("--model", type=click.Choice(MODEL_NAMES, case_sensitive=False), default=None,
              help=f"Model preset: its heads, and its topk as --topks and --wave-topk unless given: {models_help()}.")
@click.option("--heads", type=click.Choice([str(h) for h in checks.SUPPORTED_HEADS]), default=None,
              help=f"Indexer heads to measure (the calibration entry written is for these heads); overrides "
                   f"--model's [default: the config's, {checks.DEFAULT_HEADS}].")
@click.option("--device", default=None, callback=_v_device, help="cuda, cuda:N or cpu [default: cuda].")
@timing_options
@click.option("--out", default=None, callback=_v_file((".json",)),
              help="Write the calibration JSON here (use it with MQA_TOPK_CALIBRATION): this run's entry for its "
                   "heads, and the other heads' entries of the file when it is a calibration already, else of "
                   "the calibration in effect.")
@click.option("--results", "results_out", default=None, callback=_v_out, help="Also write the raw timings (.csv/.json).")
@click.option("--plot", default=None, callback=_v_file(checks.PLOT_SUFFIXES),
              help="Write a PNG (or .pdf/.svg) plot of time ratio vs keys (needs matplotlib).")
def crossover(config, paths_, topks, rows_list, keys_list, confirm, block_rows, sms, wave, wave_keys, wave_topk,
              model, heads, device, reps, warmup, cold_l2, graph, out, results_out, plot) -> None:
    """Find the key count from which the fused path beats the dense one, per
    topk, at one heads count (--heads / --model; default 32); recommend
    min-keys thresholds; check the wave rule; write a calibration file (one
    entry per heads, merged into --out when it holds one)."""
    checks.check_environment()  # the environment variables, before any work
    from rich.table import Table

    from . import crossover as xo
    from .envinfo import environment

    config_path = _config_file(config)
    sweep = xo.load_sweep(config_path)
    if paths_ is not None:
        if len(paths_) != 2:
            raise UsageError("--paths: name exactly two paths, A,B (e.g. fused,native)")
        sweep["paths"] = paths_
    m, heads_ = _model_heads(model, heads)
    if heads_ is not None:
        sweep["heads"] = heads_
    if m is not None:
        sweep["model"] = m.name
        sweep["topks"] = [m.topk]
        sweep["wave"]["topk"] = m.topk
    if topks:
        sweep["topks"] = topks
    if rows_list:
        sweep["rows"] = rows_list
    if keys_list:
        sweep["keys"] = sorted(set(keys_list))
    if wave_keys:
        sweep["wave"]["keys"] = wave_keys
    if wave_topk:
        sweep["wave"]["topk"] = int(wave_topk)
    # the inputs first (exit 2), then what this machine can run (exit 1)
    rows_name = "--rows" if rows_list else "--keys" if keys_list else f"--config {config_path}: [sweep] rows"
    sweep = xo.check_sweep(sweep, rows_name)
    dev = device or "cuda"
    if plot:
        checks.check_matplotlib("--plot")  # before the run, not after it
    base = None  # an existing calibration at --out: its other heads' entries are kept
    if out and Path(out).is_file() and Path(out).stat().st_size > 0:
        from . import eligibility

        try:
            base = eligibility.load_calibration(out)
        except UsageError as e:
            raise UsageError(f"--out {out}: exists and is not a calibration file, which this run would replace "
                             f"({e}); remove it or choose another file") from None
    xo.check_paths_available(sweep["paths"], dev)  # e.g. "the fused path is unavailable here (...)"
    dev = _resolve_device(dev, default="cuda")
    _cpu_notes(dev, graph=graph, cases=[{"rows": max(sweep["rows"]), "keys": max(sweep["keys"])}],
               what="the sweep's largest grid point",
               hint="give small --rows and --keys lists, e.g. --rows 8 --keys 600,1200,2400")
    with _progress("crossover") as prog:
        rep = xo.run_crossover(sweep, device=dev, reps=reps, warmup=warmup, cold_l2=cold_l2, graph=graph,
                               progress=prog, block_rows=block_rows, sms=sms, confirm=confirm, wave=wave, base=base)
    a, b = rep.paths
    entry = rep.entry
    con = _console()
    g = Table(title=f"timings: {a} vs {b}, {rep.heads} heads (median ms)")
    for c in ("topk", "rows", "keys", f"{a} ms", f"{b} ms", f"{a}/{b}", "winner", "status"):
        g.add_column(c, justify="left" if c in ("winner", "status") else "right")
    for p in rep.grid:
        ta, tb = p["t_a_ms"], p["t_b_ms"]
        ratio = ta / tb if ta and tb else None
        status = "ok" if p["status_a"] == "ok" and p["status_b"] == "ok" else f"{a}: {p['status_a']}; {b}: {p['status_b']}"
        g.add_row(str(p["topk"]), str(p["rows"]), str(p["keys"]), _fmt(ta), _fmt(tb), _fmt(ratio, 3),
                  (a if ratio < 1 else b) if ratio else "-", _status_style(status))
    con.print(g)
    engine = entry["measured"].get("engine")  # set when an external path was measured
    engine_now = {int(t): v for t, v in engine["defaults"].items()} if engine else xo.SM100_MIN_KEYS
    s = Table(title=f"crossover and recommended min keys ({rep.heads} heads)")
    for c in ("topk", "rows", "crossover keys", "recommended min_keys", "current calibration", "SM100 default"):
        s.add_column(c, justify="right")
    for c in rep.crossovers:
        rec = rep.recommended.get(c["topk"])
        s.add_row(str(c["topk"]), str(c["rows"]), c["label"],
                  ("never (> MAX_KEYS)" if rec is not None and rec > (1 << 22) else _fmt(rec)),
                  _fmt(rep.current.get(c["topk"])), _fmt(engine_now.get(c["topk"])))
    con.print(s)
    if rep.wave:
        cal = entry
        w = Table(title=f"wave rule at {sweep['wave']['keys']} keys, top-{sweep['wave']['topk']} "
                        f"(block rows {cal['block_rows']}, {cal['sms']} SMs, dense rows/call {rep.wave[0]['dense_rows']})")
        for c in ("rows", "blocks", "last wave", "2*last_wave>=sms", "predicted", f"{a} ms", f"{b} ms", "measured", "agree"):
            w.add_column(c, justify="right")
        for r in rep.wave:
            w.add_row(str(r["rows"]), str(r["blocks"]), str(r["last_wave"]), _fmt(r["wave_ok"]), r["predicted"],
                      _fmt(r["t_a_ms"]), _fmt(r["t_b_ms"]), r["measured"] or "-", _fmt(r["agree"]))
        con.print(w)
        click.echo(xo.wave_decision_line(cal["measured"]["wave"].get("decision"), cal["wave_rule"], (a, b),
                                         kept_from=rep.calibration_in))
    for n in rep.notes:
        click.echo(f"note: {n}")
    if engine:
        from .external import engine_constants_lines

        click.echo("\n".join(engine_constants_lines(engine, (a, b))))
    env = environment(dev)
    if out:
        p = xo.write_calibration(out, rep.calibration)
        held = ", ".join(map(str, sorted({rep.heads, *rep.kept_heads})))
        click.echo(f"wrote calibration {p}: the entry for {rep.heads} heads (entries for {held} heads in all; use it "
                   f"with MQA_TOPK_CALIBRATION={p})")
    if results_out:
        _write_out(results_out, rep.results, env, option="--results")
    if plot:
        why = xo.plot_crossover(rep, plot)
        click.echo(why if why else f"wrote plot {plot}")
    if not any(c["points"] for c in rep.crossovers):
        raise Unavailable("no grid point could be timed on both paths (see the status column)")


# ------------------------------------------------------------ inspect


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
def inspect(file: str) -> None:
    """Describe a recorded workload file: each tensor's shape and dtype, rows,
    keys, topk, row lengths, visible pairs...

    Record one from your own code with
    mqa_topk_cli.workloads.record(path, q, k, scales, weights, starts, ends, topk)
    (.safetensors or .pt; see the README, "Recording a workload")."""
    checks.check_environment()  # the environment variables, before any work
    from rich.table import Table

    from . import workloads

    if not Path(file).is_file():
        raise UsageError(f"FILE {file}: {'not a regular file' if Path(file).exists() else 'no such file'}")
    try:
        info = workloads.describe_workload(file)
    except MqaTopkError:
        raise
    except Exception as e:
        raise UsageError(f"FILE {file}: not a readable workload ({_one_line(f'{type(e).__name__}: {e}')})") from e
    t = Table(title=f"workload {file}", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value")
    for name, desc in info.pop("tensors", {}).items():  # each tensor as the file stores it
        t.add_row(f"tensor {name}", desc)
    for k, v in info.items():
        if isinstance(v, dict):
            v = ", ".join(f"{kk}={vv}" for kk, vv in v.items())
        elif isinstance(v, (list, tuple)):
            v = ", ".join(map(str, v))
        t.add_row(str(k), _fmt(v))
    _console().print(t)


if __name__ == "__main__":  # pragma: no cover
    main()
