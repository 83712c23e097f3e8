"""Pretrain a Llama: by default the tiny config on the Python standard library, on this machine's CPU.

    uv run apps/pretrain.py                                     # first run builds the corpus; reruns resume
    uv run apps/pretrain.py --trainer.num_train_steps 200       # any config field, by its dotted name
    uv run apps/pretrain.py --data.stores STORE [STORE ...]     # your own token stores
    uv run apps/pretrain.py --data.corpus FILE_OR_DIR           # text/JSONL/Parquet, tokenized on first use
    uv run apps/pretrain.py --config configs/marin_8b.yaml --dry-run [--devices N] [--mfu 0.5]
    uv run apps/pretrain.py --launch ray --slices 2 [--slice-type TYPE] [--address ADDR] [--min-slices M]

Progress and logs go to stderr; the summary goes to stdout. ``--help`` lists every field.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "tiny.yaml"
STDLIB_DIR = Path(".cache/meltemi/stdlib")  # where configs/tiny.yaml expects the default corpus
LAUNCH_FLAGS = (
    "launch",
    "slices",
    "min-slices",
    "slice-type",
    "address",
    "devices-per-host",
    "acquire-timeout",
    "scale-up-every",
    "max-failures",
)
APP_FLAGS = """
apps/pretrain.py adds:
  --dry-run               compile the train step ahead of time on fake CPU devices and print the plan
  --devices N             how many devices to plan for (default: hardware.devices, or the mesh's size)
  --mfu X                 the MFU the planned step time assumes (default 0.5)
  --data.stores P [P...]  train on these token stores (equal weights), in place of data.sources
  --data.corpus PATH      a text/JSONL/Parquet file or directory, built into a store with data.tokenizer
                          (default: the standard library's) on first use; data.text_field,
                          data.skip_bad_lines and data.invalid_utf8 say how it is read
  --data.rebuild_corpus   rebuild --data.corpus's store when the corpus (or how it is read) changed
  --launch ray            train on slices through Ray, one process per host (see the README)
  --slices N              how many slices (default 1)
  --min-slices M          start (and go on) with as few as M slices when fewer are free
  --slice-type TYPE       v4-16, v5litepod-256, gpu-8, ... (default cpu-1: a local cluster of fake slices)
  --address ADDR          a running Ray cluster (default: start a local cluster of fake CPU slices)
  --devices-per-host D    fake CPU devices per host of a cpu-* slice (default 4)
  --acquire-timeout S     how long to wait for the slices (default 600)
  --scale-up-every S      with fewer than --slices, look for more every S seconds; the hosts checkpoint and
                          the run restarts on more (default 300)
  --max-failures N        restart the job after an exception in the training up to N times (default 0)
"""


def present(argv: list[str], flag: str) -> bool:
    """Remove a value-less ``flag`` from ``argv``; whether it was there."""
    if flag in argv:
        argv.remove(flag)
        return True
    return False


def take(argv: list[str], flag: str, many: bool = False) -> list[str] | None:
    """Remove ``flag`` and its value(s) from ``argv``; its values, or None when absent."""
    if flag not in argv:
        return None
    at = argv.index(flag)
    end = at + 1
    while end < len(argv) and not argv[end].startswith("--") and (many or end == at + 1):
        end += 1
    values = argv[at + 1 : end]
    del argv[at:end]
    if not values:
        raise SystemExit(f"error: {flag} needs a value")
    return values


def stdlib_directory(vocab_size: int) -> Path:
    """The cache of the default corpus for this Python and vocabulary."""
    version = sysconfig.get_python_version()
    return STDLIB_DIR.parent / f"stdlib-py{version}-v{vocab_size}"


def main(argv: list[str]) -> int:
    argv = list(argv)
    dry_run = present(argv, "--dry-run")
    devices = take(argv, "--devices")
    mfu = take(argv, "--mfu")
    stores = take(argv, "--data.stores", many=True)
    corpus = take(argv, "--data.corpus")
    rebuild_corpus = present(argv, "--data.rebuild_corpus")
    launch = {flag: take(argv, f"--{flag}") for flag in LAUNCH_FLAGS}

    from meltemi.datastore import DatastoreError, corpora
    from meltemi.trainer.cli import help_text, split_arguments
    from meltemi.trainer.config_io import load_config
    from meltemi.trainer.errors import TrainerError
    from meltemi.trainer.startup import StartupClock

    clock = StartupClock()

    try:
        own, overrides = split_arguments(argv)
        if own.get("help") or own.get("h"):
            print(help_text() + APP_FLAGS)
            return 0
        config_path = Path(own.get("config") or DEFAULT_CONFIG)
        if stores:
            sources = {Path(s).name or f"store{i}": {"store": s} for i, s in enumerate(stores)}
            overrides += ["--data.sources", repr(sources).replace("'", '"')]
        config = load_config(config_path, overrides)
        if corpus:
            config = with_corpus(config, config_path, overrides, corpus[0], rebuild_corpus, corpora)
        if dry_run:
            return plan(config, devices, mfu)
        config = with_default_corpus(config, config_path, overrides, corpora)
        clock.lap("config")
        run_dir = Path(own.get("run_dir") or Path("runs") / config_path.stem)
        if launch["launch"]:
            return train_on_ray(config, run_dir, {k: v[0] for k, v in launch.items() if v})
        return train(config, run_dir, clock)
    except (TrainerError, DatastoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def is_default_tokenizer(config) -> bool:
    """Whether ``data.tokenizer`` is the default config's placeholder for the standard library's BPE."""
    return config.data.tokenizer is not None and Path(config.data.tokenizer).parent == STDLIB_DIR


def default_tokenizer(config, corpora) -> str:
    """The standard library's tokenizer for the model's vocabulary, trained on first use."""
    directory = stdlib_directory(config.model.vocab_size)
    if not (directory / "tokenizer.json").exists():
        print(f"training the standard-library tokenizer in {directory} (first run only)", file=sys.stderr)
    return corpora.stdlib_tokenizer(directory, config.model.vocab_size)


def with_default_corpus(config, config_path, overrides, corpora):
    """Build (once) the standard-library corpus where the config names its default location
    (``.cache/meltemi/stdlib/...``), and point the config at the built tokenizer and store (only the
    tokenizer is built when no source is the default store)."""
    default_store = [n for n, s in config.data.sources.items() if Path(s.store).parent == STDLIB_DIR]
    default_tokenizer_wanted = is_default_tokenizer(config)
    if not default_store and not default_tokenizer_wanted:
        return config
    from meltemi.trainer.config_io import load_config

    if not default_store:
        tokenizer = default_tokenizer(config, corpora)
        return load_config(config_path, [*overrides, "--data.tokenizer", tokenizer])
    directory = stdlib_directory(config.model.vocab_size)
    if not (directory / "store" / "manifest.json").exists():
        print(f"building the standard-library corpus in {directory} (first run only)", file=sys.stderr)
    tokenizer, store = corpora.stdlib_corpus(directory, config.model.vocab_size, progress=True)
    sources = {
        name: {"store": store if name in default_store else s.store, "weight": s.weight}
        for name, s in config.data.sources.items()
    }
    extra = ["--data.tokenizer", tokenizer] if default_tokenizer_wanted else []
    return load_config(config_path, [*overrides, *extra, "--data.sources", repr(sources).replace("'", '"')])


# How a user of this app sets the options of the corpus build: the words of the datastore's remedies.
CORPUS_FLAGS = {
    "text_field": "--data.text_field {}",
    "skip_bad_lines": "--data.skip_bad_lines {}",
    "invalid_utf8": "--data.invalid_utf8 {}",
    "overwrite": "--data.rebuild_corpus",
}


def with_corpus(config, config_path, overrides, corpus: str, rebuild: bool, corpora):
    """Build (on first use) a token store of ``--data.corpus`` under ``.cache/meltemi/corpora`` with
    ``data.tokenizer`` (the default config's placeholder: the standard library's), reading it as
    ``data.text_field``, ``data.skip_bad_lines`` and ``data.invalid_utf8`` say, print what the build did
    (documents left out included), and point the config at that store alone."""
    from meltemi.datastore import Hints, build_store
    from meltemi.trainer.config_io import load_config
    from meltemi.trainer.errors import TrainerError

    data = config.data
    if data.tokenizer is None:
        raise TrainerError("--data.corpus needs a tokenizer: pass --data.tokenizer TOKENIZER_JSON")
    tokenizer = default_tokenizer(config, corpora) if is_default_tokenizer(config) else data.tokenizer
    name = Path(corpus).stem or "corpus"
    digest = hashlib.sha256(str(Path(corpus).resolve()).encode()).hexdigest()[:12]
    out = Path(".cache/meltemi/corpora") / f"{name}-{digest}"
    if not (out / "manifest.json").exists():
        print(f"building a token store of {corpus} in {out} (first use only)", file=sys.stderr)
    report = build_store(
        corpus,
        tokenizer,
        out,
        text_field=data.text_field,
        skip_bad_lines=data.skip_bad_lines,
        invalid_utf8=data.invalid_utf8,
        overwrite=rebuild,
        progress=True,
        hints=Hints(CORPUS_FLAGS, rerun="the same apps/pretrain.py command"),
    )
    print(report.summary(), file=sys.stderr)
    sources = json.dumps({name: {"store": str(out)}})
    return load_config(config_path, [*overrides, "--data.tokenizer", tokenizer, "--data.sources", sources])


def train(config, run_dir: Path, clock) -> int:
    from meltemi.trainer.trainer import Trainer

    clock.lap("imports")
    summary = Trainer(config, run_dir, clock=clock).run()
    if summary.already_trained:
        print(
            f"{run_dir} is already trained to step {summary.steps}: raise --trainer.num_train_steps to go on"
        )
    elif summary.stopped_by is not None:
        print(f"stopped by {summary.stopped_by} at step {summary.steps}: saved {summary.last_checkpoint}")
        print("run the same command again to resume")
        return summary.exit_status
    elif summary.start_step == 0:
        print(
            f"steps: {summary.steps}   tokens: {summary.tokens:,}   {summary.tokens_per_second:,.0f} tokens/s"
        )
    else:  # the run as a whole, then what this session did
        print(f"steps: {summary.steps}   tokens: {summary.tokens:,} in all")
        print(summary.session_line())
    print(summary.held_out_line())
    print(f"metrics: {summary.metrics_path}\nloss curve: {summary.plot_path}")
    print(f"last checkpoint: {summary.last_checkpoint}")
    print("sample (temperature 0.7, top-k 40, from 'def '):\n" + sample(summary.last_checkpoint))
    return 0


def sample(checkpoint: Path, prompt: str = "def ", tokens: int = 48) -> str:
    """A short sampled continuation by the trained model (what apps/sample.py prints), seed 0."""
    from meltemi.trainer.generation import sample_checkpoint
    from meltemi.trainer.sampling import SamplingConfig

    result, _ = sample_checkpoint(
        checkpoint, [prompt], SamplingConfig(max_new_tokens=tokens, temperature=0.7, top_k=40)
    )
    return prompt + (result.completions[0].text or "")


def train_on_ray(config, run_dir: Path, flags: dict[str, str]) -> int:
    """Train on slices: a local cluster of fake CPU slices, or the Ray cluster at ``--address``."""
    import contextlib

    from meltemi.raytpu import LocalSliceCluster, RaytpuError
    from meltemi.trainer.errors import TrainerError
    from meltemi.trainer.launch import SliceLaunch, train_on_slices

    if flags["launch"] != "ray":
        raise TrainerError(f"--launch {flags['launch']}: the only launcher is ray")
    try:
        launch = SliceLaunch(
            slice_type=flags.get("slice-type", "cpu-1"),
            slices=int(flags.get("slices", 1)),
            min_slices=int(flags["min-slices"]) if "min-slices" in flags else None,
            devices_per_host=int(flags.get("devices-per-host", 4)),
            acquire_timeout_s=float(flags.get("acquire-timeout", 600)),
            scale_up_interval_s=float(flags.get("scale-up-every", 300)),
            max_retries_failure=int(flags.get("max-failures", 0)),
        )
        from meltemi.raytpu import slice_type

        slice_type(launch.slice_type)
    except ValueError as e:
        raise TrainerError(f"--launch ray: {e}") from None
    run_dir.mkdir(parents=True, exist_ok=True)
    if "address" in flags:
        import ray

        host, _, port = flags["address"].rpartition(":")
        try:  # Ray would retry a silent address for minutes: ask it once first
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=10).close()
        except (OSError, ValueError) as e:
            raise TrainerError(f"--address {flags['address']}: no Ray cluster answers there ({e})") from None
        try:
            ray.init(address=flags["address"], include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise TrainerError(f"--address {flags['address']}: no Ray cluster answers there ({e})") from None
        cluster = contextlib.nullcontext()
    else:
        cluster = LocalSliceCluster([(launch.slice_type, launch.slices)])
    with cluster:
        try:
            results = train_on_slices(config, run_dir, launch, event_log=str(run_dir / "events.jsonl"))
        except RaytpuError as e:
            raise TrainerError(" ".join(str(e).split())) from None
    first = results[0]
    print(f"trained on {first.process_count} processes to step {first.steps}; run directory {run_dir}")
    return 0


def plan(config, devices: list[str] | None, mfu: list[str] | None) -> int:
    """The dry run: fake the target's devices on this CPU, compile the step from shapes, print the plan."""
    mesh = config.trainer.mesh
    sizes = (mesh.replica, mesh.data, mesh.model)
    fixed = sizes[0] * sizes[1] * sizes[2] if min(sizes) > 0 else None
    count = int(devices[0]) if devices else config.hardware.devices or fixed
    if not count:
        print("error: --dry-run needs a device count: --devices N, hardware.devices, or a mesh without -1")
        return 1
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if "host_platform_device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join([*kept, f"--xla_force_host_platform_device_count={count}"])
    import jax

    from meltemi.trainer.dry_run import format_plan, plan_run

    jax.config.update("jax_platforms", "cpu")
    run = plan_run(config, jax.devices()[:count], mfu=float(mfu[0]) if mfu else 0.5)
    print(format_plan(run))
    if not run.fits:
        over = (run.compiled.peak_bytes - run.device_memory) / 2**30
        print(f"error: the plan needs {over:.2f} GiB more per device than a {run.chip} has", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
