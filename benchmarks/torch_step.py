"""Tokens/s of a PyTorch reference train step: transformers' ``LlamaForCausalLM`` of a Meltemi config's shape.

The reference issue 40 compares the trainer's 1B step with: the model built from the config through the
trainer's own Hugging Face mapping (``meltemi.trainer.hf.config_map.hf_config``: vocabulary, widths, layers,
heads, key/value heads, rope theta and scaling, norm epsilon, tied embeddings), parameters in
``trainer.param_dtype`` under ``torch.autocast`` to ``trainer.compute_dtype``, SDPA attention, AdamW (fused on
CUDA; no decay on embeddings and norms, as the trainer), gradient clipping, ``torch.compile`` on each
decoder layer (``--eager``: none), full activation checkpointing (``--no-checkpointing``: none), and the
config's global batch × sequence, accumulated over ``trainer.microbatch_size`` rows as the trainer does.
Batches are random tokens, each row one sequence (no document masking: transformers' SDPA path has none).

Each figure is the median of ``--steps`` timed steps after ``--warmup`` steps (compilation happens there).
MFU uses the trainer's formula (``meltemi.trainer.step.flops``) and the device's listed bf16 peak; JAX is
kept on the CPU in this process so that it takes no GPU memory. The last line is ``tokens/s: N``.

    uv run python benchmarks/torch_step.py                        # configs/llama_1b.yaml, on a GPU
    uv run python benchmarks/torch_step.py --smoke                # a tiny shape on any machine (seconds)
    uv run python benchmarks/torch_step.py --eager --no-checkpointing --trainer.global_batch_size 16
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
import types
from collections.abc import Iterator

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # before any JAX import: the GPU stays PyTorch's

import torch
import transformers

from meltemi.trainer.config import RunConfig
from meltemi.trainer.config_io import load_config
from meltemi.trainer.hf.config_map import hf_config
from meltemi.trainer.step.flops import flops_per_token, peak_flops_per_device

# A shape that runs in seconds on a CPU: every code path of the real one, none of its size.
SMOKE_OVERRIDES = [
    *("--model.vocab_size", "512", "--model.hidden_dim", "64", "--model.intermediate_dim", "128"),
    *("--model.num_layers", "2", "--model.num_heads", "4", "--model.num_kv_heads", "2"),
    *("--model.max_seq_len", "64", "--data.seq_len", "64"),
    *("--trainer.global_batch_size", "4", "--trainer.microbatch_size", "2"),
]


def torch_dtype(name: str) -> torch.dtype:
    """``float32``/``bfloat16``/``float16`` as torch's dtype."""
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def build_model(config: RunConfig, device: torch.device, *, compiled: bool, checkpointing: bool):
    """``LlamaForCausalLM`` of ``config.model``'s shape on ``device``, in ``trainer.param_dtype``, SDPA
    attention, in training mode; each decoder layer compiled and checkpointed as asked."""
    dtype = config.trainer.param_dtype
    fields = hf_config(config.model, dtype=dtype)
    hf = transformers.LlamaConfig(**fields, attn_implementation="sdpa")
    hf.use_cache = False
    with device:
        model = transformers.LlamaForCausalLM(hf).to(torch_dtype(dtype))
    if checkpointing:
        enable_checkpointing(model)
    if compiled:
        # One compiled program per layer; the layers differ only in their weights and index, so leave room
        # for a recompilation each rather than falling back to eager after the default limit of 8.
        torch._dynamo.config.cache_size_limit = max(64, 2 * config.model.num_layers)
        for layer in model.model.layers:
            layer.compile()
    model.train()
    return model


def enable_checkpointing(model: transformers.PreTrainedModel) -> None:
    """Checkpoint every decoder layer (non-reentrant), by the method's new name where transformers has it."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def compile_counts() -> str:
    """What torch.compile did in this process: graphs compiled and graph breaks (a break runs eagerly)."""
    counters = torch._dynamo.utils.counters
    breaks = sum(counters["graph_break"].values())
    return f"torch.compile: {counters['stats']['unique_graphs']} graphs, {breaks} graph breaks"


def build_optimizer(config: RunConfig, model: torch.nn.Module, device: torch.device) -> torch.optim.AdamW:
    """AdamW with the config's rate, betas, epsilon and decay; embeddings and norms undecayed (the trainer's
    default); fused on CUDA."""
    o = config.optimizer
    decayed, undecayed = [], []
    for name, parameter in model.named_parameters():
        keep = parameter.ndim < 2 or "embed" in name
        (undecayed if keep and not o.decay_embeddings_and_norms else decayed).append(parameter)
    groups = [
        {"params": decayed, "weight_decay": o.weight_decay},
        {"params": undecayed, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups, lr=o.learning_rate, betas=(o.beta1, o.beta2), eps=o.epsilon, fused=device.type == "cuda"
    )


def random_batches(config: RunConfig, count: int, device: torch.device) -> list[torch.Tensor]:
    """``count`` batches of random token ids, ``global batch × seq_len`` each (the labels are the ids,
    shifted by the model's loss as Hugging Face does)."""
    rows, length = config.trainer.batch_sizes()[0], config.data.seq_len
    generator = torch.Generator().manual_seed(0)
    return [
        torch.randint(0, config.model.vocab_size, (rows, length), generator=generator).to(device)
        for _ in range(count)
    ]


def autocast(config: RunConfig, device: torch.device) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to the compute dtype, or nothing when it is the parameters' dtype."""
    compute = config.trainer.compute_dtype
    if compute == config.trainer.param_dtype:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch_dtype(compute))


def microbatches(batch: torch.Tensor, size: int | None) -> Iterator[torch.Tensor]:
    """The rows in groups of ``size`` (the trainer's microbatches; all at once when None)."""
    yield from batch.split(size or batch.shape[0])


def train_step(model, optimizer, batch: torch.Tensor, config: RunConfig, device: torch.device) -> float:
    """One optimizer step over ``batch``, gradients accumulated over microbatches; returns the mean loss
    (waiting for the device)."""
    parts = list(microbatches(batch, config.trainer.microbatch_size))
    total = torch.zeros((), device=device)
    for part in parts:
        with autocast(config, device):
            loss = model(input_ids=part, labels=part).loss / len(parts)
        loss.backward()
        total += loss.detach()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.optimizer.max_grad_norm, foreach=True)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(total)  # synchronizes


def device_kind(device: torch.device) -> str:
    """The device's name as JAX would give it (``NVIDIA H100 80GB HBM3``), for the peak-FLOP/s table."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/llama_1b.yaml")
    parser.add_argument("--steps", type=int, default=3, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation)")
    parser.add_argument("--eager", action="store_true", help="no torch.compile")
    parser.add_argument("--no-checkpointing", action="store_true", help="keep every activation")
    parser.add_argument("--smoke", action="store_true", help="a tiny shape, to test the script anywhere")
    args, overrides = parser.parse_known_args()
    config = load_config(args.config, [*(SMOKE_OVERRIDES if args.smoke else []), *overrides])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    compiled, checkpointing = not args.eager, not args.no_checkpointing
    rows, length = config.trainer.batch_sizes()[0], config.data.seq_len

    print(
        f"device: {device_kind(device)}; torch {torch.__version__}; transformers {transformers.__version__}; "
        f"config {args.config}" + (" (smoke shape: these numbers mean nothing)" if args.smoke else "")
    )
    print(
        f"batch {rows} x {length} in microbatches of {config.trainer.microbatch_size or rows}; parameters "
        f"{config.trainer.param_dtype}, autocast {config.trainer.compute_dtype}; SDPA; "
        f"{'per-layer torch.compile' if compiled else 'eager'}; "
        f"{'full checkpointing' if checkpointing else 'no checkpointing'}"
    )
    model = build_model(config, device, compiled=compiled, checkpointing=checkpointing)
    optimizer = build_optimizer(config, model, device)
    batches = random_batches(config, args.warmup + args.steps, device)

    started = time.perf_counter()
    for batch in batches[: args.warmup]:
        train_step(model, optimizer, batch, config, device)
    print(f"warm-up: {time.perf_counter() - started:.1f} s for {args.warmup} steps (compilation included)")
    if compiled:
        print(compile_counts())
    times, losses = [], []
    for batch in batches[args.warmup :]:
        started = time.perf_counter()
        losses.append(train_step(model, optimizer, batch, config, device))
        times.append(time.perf_counter() - started)

    seconds = statistics.median(times)
    tokens_per_s = rows * length / seconds
    flops = flops_per_token(config.model, length) * tokens_per_s
    peak = peak_flops_per_device(types.SimpleNamespace(device_kind=device_kind(device)))
    if device.type == "cuda":
        print(f"peak memory allocated: {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB")
    print(f"step: {seconds * 1e3:.1f} ms (median of {len(times)}); last loss {losses[-1]:.3f}")
    mfu = f"MFU {flops / peak:.1%}" if peak else f"MFU not measured: no listed peak for {device_kind(device)}"
    print(f"model FLOP/s: {flops / 1e9:.1f} G; {mfu}")
    print(f"tokens/s: {tokens_per_s:.0f}")


if __name__ == "__main__":
    main()
