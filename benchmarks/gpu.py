"""Every GPU figure of issue 40 in one call within a time budget, printed as one table.

The parts, in order of priority, each a subprocess of another benchmark script:

- ``trainer-shipped``: ``trainer_step.py --config configs/llama_1b.yaml`` as shipped (rows of ~4 documents
  kept apart; the config's remat policy), beside its plain-JAX reference;
- ``torch``: ``torch_step.py``, transformers' Llama of the same shape (compiled layers, full checkpointing,
  whole rows), so that "ours / PyTorch" comes from the same call;
- ``trainer-whole-rows``: the trainer's step with attention over whole rows (cuDNN);
- ``trainer-mosaic``: the shipped step with ``model.attention: mosaic``, our kernels on Mosaic GPU;
- ``attention-documents``, ``attention-whole``: ``kernels_attention.py`` at the 1B step's shapes (4,096-token
  rows, 8 of them, 32/8 heads, head size 64, bf16, causal), with segment ids (~4 documents a row) and without:
  our kernels on Triton (``pallas``) and on Mosaic GPU (``mosaic``), cuDNN on whole rows, and JAX's own flash
  attention on Mosaic GPU (``jax-mosaic``, whole rows);
- ``attention-forward``: the forward pass alone on whole rows, the same four;
- ``remat-<policy>``: the trainer's step at each remat policy the config does not ship (``none`` last);
- ``gpu-tests``: ``pytest -m gpu`` over the test files that hold GPU tests (attention on Triton, Mosaic GPU,
  cuDNN and XLA, the cross-entropy kernels, a bf16 trainer step of the tiny model against the CPU's, in bf16
  and fp8 matmuls);
- ``attention-mosaic-blocks``: our Mosaic GPU kernels with segment ids at other tiles and depths
  (``MOSAIC_SWEEP``), each against cuDNN on whole rows, so their defaults can be chosen at the model's shapes.

Also available by ``--parts``: ``fp8`` (``fp8_step.py``, bf16 then fp8 matmuls for ``--fp8-steps`` steps,
100 by default: about 270 s, so a call of its own, as the defaults fill the budget), ``attention-blocks``
(the same sweep for the Pallas Triton kernel, ``PALLAS_SWEEP``, whose defaults were chosen so on an H200),
``torch-eager``, ``torch-no-checkpointing``. ``--torch-microbatch N`` runs the PyTorch steps in microbatches
of N rows (the config's 8 by default, as the trainer), should they not fit.

Each part runs with a timeout derived from what is left of ``--budget-s``: that less the seconds the parts
after it are estimated to need (on an H100, from the H200 figures in RESULTS.md), or twice its own estimate
if that is more, so a part may use what an earlier one left, and may overrun its estimate at the expense of
the parts after it (the order is the priority). A part that runs out is reported as "not measured: timed
out", one that fails as "not measured" with its last line, one left no time as "not measured: the budget
was spent"; no figure is ever made up. The parts' output goes to ``OUT/parts.log`` (one section each)
and the table to ``OUT/table.md``; the table is printed last. JAX parts run with
``XLA_PYTHON_CLIENT_MEM_FRACTION=0.95`` unless it is set.

    python3 benchmarks/gpu.py --out $OUT                 # on the GPU machine (see benchmarks/README.md)
    uv run python benchmarks/gpu.py --smoke --out /tmp/gpu-smoke   # every part at tiny shapes on a CPU
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "configs/llama_1b.yaml"

# The 1B config at a shape that runs in seconds on a CPU (torch_step.py --smoke uses the same).
SMOKE_MODEL = (
    *("--model.vocab_size", "512", "--model.hidden_dim", "64", "--model.intermediate_dim", "128"),
    *("--model.num_layers", "2", "--model.num_heads", "4", "--model.num_kv_heads", "2"),
    *("--model.max_seq_len", "64", "--data.seq_len", "64"),
)
SMOKE_BATCH = ("--trainer.global_batch_size", "4", "--trainer.microbatch_size", "2")
# kernels_attention.py at the 1B step's shapes: one microbatch of 8 rows of 4,096 tokens.
ATTENTION_SHAPE = (
    *("--seqs", "4096", "--tokens", "32768", "--heads", "32", "--kv-heads", "8", "--head-dim", "64"),
    *("--repeats", "5"),
)
FORWARD = ("pallas", "mosaic", "cudnn", "jax-mosaic")
GPU_TEST_FILES = (
    "packages/kernels/tests/test_kern_attention_behaviour.py",
    "packages/kernels/tests/test_kern_cross_entropy.py",
    "packages/trainer/tests/test_tr_step.py",
)
SHIPPED_REMAT = yaml.safe_load((ROOT / CONFIG).read_text(encoding="utf-8"))["model"]["remat"]
# The policies the config does not ship; plan() runs "none" last, the likeliest to run out of memory.
REMAT_POLICIES = tuple(p for p in ("full", "save_dots", "offload", "none") if p != SHIPPED_REMAT)
# Tile settings beside the default 128,64,64,64 with 4 warps and 3 stages at head size 64
# (Q,K,BACKWARD_Q,BACKWARD_K[,WARPS[,STAGES]]): the two stages it replaced, narrower tiles, a fourth
# stage, and a narrower tile in one pass at a time. On an H200 (2026-11-27), cuDNN's whole-row time over
# each setting's: 1.29 with two stages, 1.40 with three, 1.32 for 64,64,64,64 at two.
PALLAS_SWEEP = (
    "128,64,64,64,4,2",
    "64,64,64,64,4,3",
    "128,64,64,64,4,4",
    "64,64,64,64,4,4",
    "128,128,64,64,4,3",
    "128,64,32,64,4,3",
    "128,64,64,32,4,3",
)
# Our Mosaic GPU kernels' settings beside their default 64,64,64,64,2 (Q,K,BACKWARD_Q,BACKWARD_K,STAGES):
# a third buffer per stream, and wider key or query tiles in one pass at a time.
MOSAIC_SWEEP = (
    "64,64,64,64,3",
    "64,128,64,64,2",
    "128,64,64,64,2",
    "128,128,64,64,2",
    "64,64,128,64,2",
    "64,64,64,128,2",
)


@dataclasses.dataclass(frozen=True)
class Part:
    """One subprocess: a benchmark script and its flags, and ``estimate_s``, the seconds it is expected to
    need on an H100 (held back for it while the parts before it run)."""

    name: str
    argv: tuple[str, ...]
    estimate_s: float
    jax: bool = True  # a JAX process (given the memory fraction)
    default: bool = True  # run without --parts


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a part ended: ``ok``, ``timed out``, ``failed`` or ``not run``; its output; why, if not ok."""

    status: str
    seconds: float = 0.0
    output: str = ""
    reason: str = ""


def plan(smoke: bool, fp8_steps: int, torch_microbatch: int | None) -> list[Part]:
    """Every part, in priority order, at the 1B shape (or, ``smoke``, at tiny shapes on any machine)."""
    shape = (*SMOKE_MODEL, *SMOKE_BATCH) if smoke else ()
    trainer = ("benchmarks/trainer_step.py", "--config", CONFIG, "--rounds", "1", *shape)
    attention = ("benchmarks/kernels_attention.py", *(("--smoke",) if smoke else ATTENTION_SHAPE))
    torch = ("benchmarks/torch_step.py", "--config", CONFIG, "--warmup", "1", "--steps", "2")
    torch += ("--smoke", *shape) if smoke else ()
    torch += ("--trainer.microbatch_size", str(torch_microbatch)) if torch_microbatch else ()
    fp8 = ("benchmarks/fp8_step.py", "--config", CONFIG, "--steps", str(fp8_steps))
    fp8 += ("--rows", "4", *SMOKE_MODEL, "--trainer.microbatch_size", "2") if smoke else ()
    documents = (*attention, "--documents", "4", "--implementations")
    gpu_tests = ("-m", "pytest", "-m", "gpu", "-n", "0", "-q", "-p", "no:cacheprovider", *GPU_TEST_FILES)
    remat = {p: (*trainer, "--steps", "1", "--skip-reference", "--model.remat", p) for p in REMAT_POLICIES}
    return [
        Part("trainer-shipped", (*trainer, "--steps", "2"), 70),
        Part("torch", torch, 60, jax=False),
        Part("trainer-whole-rows", (*trainer, "--steps", "1", "--whole-rows", "--skip-reference"), 30),
        Part(
            "trainer-mosaic",
            (*trainer, "--steps", "1", "--skip-reference", "--model.attention", "mosaic"),
            30,
        ),
        Part("attention-documents", (*documents, "pallas", "mosaic", "xla"), 20),
        Part(
            "attention-whole",
            (*attention, "--implementations", "pallas", "mosaic", "cudnn", "xla", "jax-mosaic"),
            20,
        ),
        *(Part(f"remat-{p}", remat[p], 35) for p in REMAT_POLICIES if p != "none"),
        Part("fp8", fp8, 270, default=False),
        *(Part(f"remat-{p}", remat[p], 35) for p in REMAT_POLICIES if p == "none"),
        Part("gpu-tests", gpu_tests, 60, jax=False),  # each test process allocates what it uses
        Part("attention-forward", (*attention, "--forward-only", "--implementations", *FORWARD), 15),
        Part("attention-mosaic-blocks", (*documents, "mosaic", "--mosaic-blocks", *MOSAIC_SWEEP), 35),
        Part("attention-blocks", (*documents, "pallas", "--pallas-blocks", *PALLAS_SWEEP), 35, default=False),
        Part("torch-eager", (*torch, "--eager"), 60, jax=False, default=False),
        Part("torch-no-checkpointing", (*torch, "--no-checkpointing"), 80, jax=False, default=False),
    ]


def run_part(part: Part, timeout_s: float, log: BinaryIO) -> Outcome:
    """Run ``part`` with its output appended to ``log`` (a file open for appending bytes), killed with its
    children after ``timeout_s``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if part.jax:
        env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    command = [sys.executable, *part.argv]
    log.write(f"\n===== {part.name}: {' '.join(command)} (timeout {timeout_s:.0f} s)\n".encode())
    log.flush()
    start = log.tell()
    started = time.monotonic()
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        code = None
    seconds = time.monotonic() - started
    with open(log.name, "rb") as f:
        f.seek(start)
        output = f.read().decode("utf-8", errors="replace")
    if code is None:
        return Outcome("timed out", seconds, output, f"timed out after {timeout_s:.0f} s")
    if code != 0:
        last = [line for line in output.splitlines() if line.strip()][-1:] or ["no output"]
        return Outcome("failed", seconds, output, f"failed (exit {code}): {last[0].strip()[:160]}")
    return Outcome("ok", seconds, output)


def run_all(parts: list[Part], budget_s: float, started: float, log: BinaryIO) -> dict[str, Outcome]:
    """Each part in turn, its timeout what is left of the budget less the later parts' estimates, or twice
    its own estimate if that is more (a part may overrun its estimate at the expense of those after it)."""
    outcomes: dict[str, Outcome] = {}
    for i, part in enumerate(parts):
        left = budget_s - (time.monotonic() - started)
        reserve = sum(later.estimate_s for later in parts[i + 1 :])
        timeout = min(left, max(2 * part.estimate_s, left - reserve))
        if timeout < 10:
            outcomes[part.name] = Outcome("not run", reason=f"the {budget_s:.0f} s budget was spent")
            print(f"[{budget_s - left:5.0f} s] {part.name}: not run (budget spent)", flush=True)
            continue
        print(f"[{budget_s - left:5.0f} s] {part.name}: running (timeout {timeout:.0f} s)", flush=True)
        outcomes[part.name] = outcome = run_part(part, timeout, log)
        print(f"        {part.name}: {outcome.status} in {outcome.seconds:.0f} s", flush=True)
    return outcomes


# ---- the table ---------------------------------------------------------------------------------------------


def last_match(pattern: str, text: str) -> re.Match | None:
    """The last line of ``text`` that ``pattern`` matches (multiline)."""
    matches = list(re.finditer(pattern, text, re.MULTILINE))
    return matches[-1] if matches else None


def number(text: str) -> float:
    return float(text.replace(",", ""))


@dataclasses.dataclass(frozen=True)
class Figure:
    """One measured figure (``value``, and ``text`` saying it with its unit), or none (``value`` None and
    ``text`` "not measured: why")."""

    value: float | None
    text: str


def ratio(top: Figure, bottom: Figure) -> str:
    """``top / bottom`` to two decimals, or why one of them was not measured."""
    for figure in (top, bottom):
        if figure.value is None:
            return figure.text
    return f"{top.value / bottom.value:.2f}"


class Figures:
    """Reads figures out of the parts' output; a figure that is missing reads as "not measured: why"."""

    def __init__(self, outcomes: dict[str, Outcome]):
        self.outcomes = outcomes

    def why_not(self, part: str) -> Figure:
        outcome = self.outcomes.get(part)
        if outcome is None:
            return Figure(None, "not measured: not among --parts")
        if outcome.status != "ok":
            return Figure(None, f"not measured: {outcome.reason}")
        return Figure(None, "not measured: the part printed no such figure")

    def find(self, part: str, pattern: str) -> re.Match | None:
        outcome = self.outcomes.get(part)
        return last_match(pattern, outcome.output) if outcome and outcome.status == "ok" else None

    def value(self, part: str, pattern: str, unit: str) -> Figure:
        """The number in ``pattern``'s first group, on the last line that matches it."""
        match = self.find(part, pattern)
        if not match:
            return self.why_not(part)
        value = number(match.group(1))
        return Figure(value, f"{value:,.0f} {unit}")

    def tokens_per_s(self, part: str) -> Figure:
        if part.startswith("torch"):
            return self.value(part, r"^tokens/s: ([\d,.]+)$", "tokens/s")
        return self.value(part, r"^trainer step:\s+([\d,.]+) tokens/s", "tokens/s")

    def step(self, part: str) -> str:
        """``N tokens/s, MFU x%, temporaries y MiB`` of a trainer or PyTorch step, or why not."""
        speed = self.tokens_per_s(part)
        if speed.value is None:
            return speed.text
        mfu = self.find(part, r"MFU ([\d.]+%)")
        words = [speed.text, f"MFU {mfu.group(1)}" if mfu else "MFU: no listed peak"]
        temporaries = self.find(part, r"temporaries ([\d.]+) MiB")
        if temporaries:
            words.append(f"temporaries {number(temporaries.group(1)):,.0f} MiB")
        peak = self.find(part, r"^peak memory allocated: ([\d.]+) GiB")
        if peak:
            words.append(f"peak memory {peak.group(1)} GiB")
        micro = self.find(part, r"^batch (\d+) x (\d+) in microbatches of (\d+);")
        if micro:
            words.append(f"batch {micro.group(1)} × {micro.group(2)} in microbatches of {micro.group(3)}")
        return ", ".join(words)

    def attention(self, part: str, implementation: str) -> Figure:
        """Milliseconds of one implementation in a kernels_attention.py part, said with its shape and
        TFLOP/s; or why not (its own failure line first)."""
        line = rf"^\s*seq\s+(\d+) batch\s+(\d+)\s+{implementation}:"
        match = self.find(part, line + r"\s+([\d.]+) ms\s+([\d.]+) TFLOP/s")
        if match:
            seq, batch, ms, tflops = match.groups()
            return Figure(number(ms), f"{ms} ms, {tflops} TFLOP/s (seq {seq} × batch {batch})")
        failed = self.find(part, line + " failed: (.*)$")
        return (
            Figure(None, f"not measured: failed: {failed.group(3)[:160]}") if failed else self.why_not(part)
        )

    def sweep(self, part: str) -> list[tuple[str, Figure]]:
        """Every ``pallas[…]`` or ``mosaic[…]`` setting a kernels_attention.py part timed, with its figure
        (or failure)."""
        outcome = self.outcomes.get(part)
        if not outcome or outcome.status != "ok":
            return []
        labels = dict.fromkeys(
            re.findall(r"^\s*seq\s+\d+ batch\s+\d+\s+((?:pallas|mosaic)\[[\d,]+\]):", outcome.output, re.M)
        )
        return [(name, self.attention(part, re.escape(name))) for name in labels]

    def fp8(self, name: str) -> tuple[Figure, Figure]:
        """(tokens/s with MFU and loss, mean loss of the last 10 steps) of ``bfloat16`` or ``fp8`` in the fp8
        part's table."""
        n = r"([\d.,]+)"
        match = self.find("fp8", rf"^{name} \| {n} \| {n} \| ([^|]+) \| {n} \| {n}$")
        if not match:
            return self.why_not("fp8"), self.why_not("fp8")
        speed, mfu, loss = number(match.group(2)), match.group(3).strip(), number(match.group(4))
        summary = f"{speed:,.0f} tokens/s, MFU {mfu}, loss (last 10 steps) {loss:.4f}"
        return Figure(speed, summary), Figure(loss, f"{loss:.4f}")


def table_rows(f: Figures) -> list[tuple[str, str, str]]:
    """(what, measured, target) for every figure of issue 40."""
    shipped, torch = f.tokens_per_s("trainer-shipped"), f.tokens_per_s("torch")
    whole, mosaic_step = f.tokens_per_s("trainer-whole-rows"), f.tokens_per_s("trainer-mosaic")
    reference = f.value("trainer-shipped", r"^plain JAX step:\s+([\d,.]+) tokens/s", "tokens/s")
    documents, cudnn = f.attention("attention-documents", "pallas"), f.attention("attention-whole", "cudnn")
    mosaic = f.attention("attention-documents", "mosaic")
    (bf16, bf16_loss), (fp8, fp8_loss) = f.fp8("bfloat16"), f.fp8("fp8")
    attention = "attention fwd+bwd (kernels_attention.py, bf16, causal)"
    torch_step = "PyTorch: LlamaForCausalLM, bf16 autocast, SDPA, fused AdamW"
    rows = [
        (
            f"trainer, 1B as shipped (documents kept apart, remat {SHIPPED_REMAT})",
            f.step("trainer-shipped"),
            "≥ 45% MFU",
        ),
        ("plain-JAX reference of the same step", reference.text, ""),
        ("trainer / plain JAX", ratio(shipped, reference), "≥ 0.95"),
        ("trainer, whole rows (no segment ids: cuDNN on a GPU)", f.step("trainer-whole-rows"), ""),
        ("trainer, documents kept apart by our Mosaic GPU kernels", f.step("trainer-mosaic"), ""),
        (f"{torch_step}, compiled layers, full checkpointing, whole rows", f.step("torch"), ""),
        ("**ours as shipped / PyTorch**", ratio(shipped, torch), "≥ 1.1"),
        ("ours with whole rows / PyTorch", ratio(whole, torch), ""),
        ("ours with the Mosaic GPU kernels / PyTorch", ratio(mosaic_step, torch), ""),
        ("ours with the Mosaic GPU kernels / as shipped", ratio(mosaic_step, shipped), ""),
        (f"{torch_step}, eager, full checkpointing", f.step("torch-eager"), ""),
        (f"{torch_step}, compiled layers, no checkpointing", f.step("torch-no-checkpointing"), ""),
        (f"{attention}: pallas, ~4 documents a row", documents.text, ""),
        (f"{attention}: mosaic, ~4 documents a row", mosaic.text, ""),
        (f"{attention}: xla, ~4 documents a row", f.attention("attention-documents", "xla").text, ""),
        (f"{attention}: pallas, whole rows", f.attention("attention-whole", "pallas").text, ""),
        (f"{attention}: mosaic, whole rows", f.attention("attention-whole", "mosaic").text, ""),
        (f"{attention}: cuDNN, whole rows", cudnn.text, ""),
        (
            "**pallas with documents / cuDNN on whole rows** (cuDNN's time / pallas's)",
            ratio(cudnn, documents),
            "≥ 0.9",
        ),
        (
            "**mosaic with documents / cuDNN on whole rows** (cuDNN's time / mosaic's; a backend JAX keeps)",
            ratio(cudnn, mosaic),
            "≥ 0.9",
        ),
    ]
    jax_mosaic = f.attention("attention-whole", "jax-mosaic")
    rows += [
        (f"{attention}: jax-mosaic (JAX's Mosaic GPU flash attention), whole rows", jax_mosaic.text, ""),
        ("jax-mosaic / cuDNN, whole rows (cuDNN's time / its)", ratio(cudnn, jax_mosaic), ""),
    ]
    forward = {name: f.attention("attention-forward", name) for name in FORWARD}
    rows += [(f"attention forward alone, whole rows: {n}", forward[n].text, "") for n in FORWARD]
    rows += [
        (f"forward alone: {n} / cuDNN (cuDNN's time / its)", ratio(forward["cudnn"], forward[n]), "")
        for n in FORWARD
        if n != "cudnn"
    ]
    rows += [
        (
            f"{attention}: {name}, ~4 documents a row; cuDNN's time / its",
            f"{figure.text}; {ratio(cudnn, figure)}",
            "",
        )
        for name, figure in (*f.sweep("attention-mosaic-blocks"), *f.sweep("attention-blocks"))
    ] or [
        (
            f"{attention}: other Mosaic tiles, ~4 documents a row",
            f.why_not("attention-mosaic-blocks").text,
            "",
        )
    ]
    tests = f.find("gpu-tests", r"^(\d+ (?:passed|skipped|deselected)\b.*) in [\d.]+s")
    rows += [
        (
            "`pytest -m gpu` (attention on Triton, Mosaic GPU, cuDNN, XLA; cross-entropy; a bf16 step)",
            tests.group(1) if tests else f.why_not("gpu-tests").text,
            "all pass, none skipped",
        )
    ]
    rows += [(f"remat {SHIPPED_REMAT} (as shipped)", f.step("trainer-shipped"), "")]
    rows += [(f"remat {p}", f.step(f"remat-{p}"), "") for p in REMAT_POLICIES]
    rows += [
        ("bf16 matmuls (fp8_step.py)", bf16.text, ""),
        ("fp8 matmuls (fp8_step.py, the same batches)", fp8.text, ""),
        ("fp8 / bf16 tokens/s", ratio(fp8, bf16), "> 1"),
        ("fp8 / bf16 loss (mean of the last 10 steps)", ratio(fp8_loss, bf16_loss), "≤ 1.02"),
    ]
    return rows


def packages_source(trainer_file: str) -> str:
    """Where the parts' ``meltemi`` packages come from: this checkout's files, or wheels installed elsewhere
    (with what ``gpu_prepare.py`` built them from, when ``.whl/built_from.txt`` says)."""
    if not trainer_file.endswith(".py"):
        return trainer_file  # why meltemi.trainer did not import
    if Path(trainer_file).resolve().is_relative_to(ROOT / "packages"):
        return "this checkout's packages/"
    built_from = ROOT / ".whl" / "built_from.txt"
    source = f" (built from {built_from.read_text().strip()})" if built_from.exists() else ""
    return f"wheels installed in {Path(trainer_file).parents[2]}{source}"


# Run in a subprocess: JAX's device and version, and where meltemi.trainer is imported from (or why not).
PROBE = """
import json
import jax
d = jax.devices()[0]
try:
    import meltemi.trainer
    trainer = meltemi.trainer.__file__
except Exception as error:
    trainer = f"meltemi.trainer does not import: {error!r}"[:200]
print(json.dumps([d.device_kind, d.platform, jax.__version__, trainer]))
"""


def environment(timeout_s: float = 120) -> dict[str, str]:
    """Device kind, JAX version and where our packages come from (from a subprocess, so this process holds
    no GPU memory), the NVIDIA driver, and the date."""
    facts = {"date": datetime.date.today().isoformat(), "platform": "unknown"}
    try:
        result = subprocess.run(
            [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=timeout_s, check=True
        )
        facts["device"], facts["platform"], facts["jax"], trainer_file = json.loads(
            result.stdout.splitlines()[-1]
        )
        facts["packages"] = packages_source(trainer_file)
    except (subprocess.SubprocessError, IndexError, ValueError) as error:
        stderr = getattr(error, "stderr", None) or ""
        last = [line for line in stderr.splitlines() if line.strip()][-1:] or [type(error).__name__]
        unknown = f"unknown (the probe failed: {last[0][:160]})"
        facts.update(device=unknown, jax="unknown", packages="unknown")
    smi = shutil.which("nvidia-smi")
    if smi:
        query = [smi, "--query-gpu=driver_version", "--format=csv,noheader"]
        result = subprocess.run(query, capture_output=True, text=True, timeout=30)
        facts["driver"] = result.stdout.strip().splitlines()[0] if result.stdout.strip() else "unknown"
    else:
        facts["driver"] = "none (no nvidia-smi)"
    return facts


def render(
    facts: dict[str, str], outcomes: dict[str, Outcome], budget_s: float, used_s: float, smoke: bool
) -> str:
    """The table as Markdown, headed by the device, driver, versions and date, ended by each part's time."""
    figures = Figures(outcomes)
    versions = figures.find("torch", r"torch (\S+); transformers (\S+);")
    torch_versions = (
        f"torch {versions.group(1)}, transformers {versions.group(2)}" if versions else "torch: not run"
    )
    lines = [
        f"## issue 40 on {facts['device']} — driver {facts['driver']}, jax {facts['jax']}, {torch_versions}, "
        f"{facts['date']}",
        "",
        f"`benchmarks/gpu.py`{' --smoke (tiny shapes: these numbers mean nothing)' if smoke else ''}: "
        f"{used_s:.0f} s of a {budget_s:.0f} s budget. Our packages: {facts['packages']}. JAX parts' "
        f"XLA_PYTHON_CLIENT_MEM_FRACTION: {os.environ.get('XLA_PYTHON_CLIENT_MEM_FRACTION', '0.95')}.",
        "",
        "| what | measured | target |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {what} | {measured} | {target} |" for what, measured, target in table_rows(figures)]
    lines += ["", "| part | status | seconds |", "| --- | --- | --- |"]
    for name, outcome in outcomes.items():
        status = outcome.reason or outcome.status
        lines.append(f"| {name} | {status} | {outcome.seconds:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for parts.log and table.md")
    parser.add_argument("--budget-s", type=float, default=480, help="seconds for everything (default 8 min)")
    parser.add_argument(
        "--parts",
        nargs="+",
        help="which parts, in this order (default: all but torch-eager, torch-no-checkpointing)",
    )
    parser.add_argument("--fp8-steps", type=int, default=100, help="steps of each fp8_step.py run")
    parser.add_argument(
        "--torch-microbatch",
        type=int,
        help="rows per microbatch of the PyTorch step (default: the config's, as the trainer's step)",
    )
    parser.add_argument("--smoke", action="store_true", help="every part at tiny shapes, on any machine")
    args = parser.parse_args()
    started = time.monotonic()
    every = {part.name: part for part in plan(args.smoke, args.fp8_steps, args.torch_microbatch)}
    names = args.parts or [part.name for part in every.values() if part.default]
    unknown = [n for n in names if n not in every]
    if unknown:
        parser.error(f"unknown parts {unknown}; known: {' '.join(every)}")
    args.out.mkdir(parents=True, exist_ok=True)

    facts = environment()
    print(f"{facts['device']}; driver {facts['driver']}; jax {facts['jax']}; {facts['date']}", flush=True)
    print(f"our packages: {facts['packages']}", flush=True)
    if facts["platform"] not in ("gpu", "unknown") and not args.smoke:
        sys.exit(f"JAX sees no GPU here ({facts['platform']}): nothing measured. --smoke runs tiny shapes.")
    if facts["packages"].startswith("meltemi.trainer does not import"):
        sys.exit(
            f"{facts['packages']}: nothing measured (on the GPU machine, install .whl first: README.md)."
        )
    with open(args.out / "parts.log", "wb") as log:
        outcomes = run_all([every[n] for n in names], args.budget_s, started, log)
    table = render(facts, outcomes, args.budget_s, time.monotonic() - started, args.smoke)
    (args.out / "table.md").write_text(table, encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
