"""Sampling filters, as properties over random logits: top-k keeps the k largest, top-p the fewest tokens
whose probability reaches p, and every draw comes from what the filters keep; and the apps' flags for them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from meltemi.trainer.generate.sampling import SamplingConfig, filter_logits, next_tokens

# Subnormal floats are flushed to zero on XLA's CPU backend, which would turn distinct logits into ties.
logits = st.floats(-8, 8, allow_nan=False, allow_subnormal=False, width=32)
distinct_rows = st.integers(2, 40).flatmap(lambda n: st.lists(logits, min_size=n, max_size=n, unique=True))

# Compiled with the settings static, as generation runs them (inside `_decode_chunk`): one program per
# example, where running them eagerly compiled one per operation (twice the CPU: 26 s against 13 s).
compiled_filter = jax.jit(filter_logits, static_argnums=1)
compiled_next = jax.jit(next_tokens, static_argnums=2)
# Both in one program: a draw's settings are new in every example, so each compiles anyway.
compiled_filter_and_next = jax.jit(
    lambda logits, key, settings: (filter_logits(logits, settings), next_tokens(logits, key, settings)),
    static_argnums=2,
)


@given(row=distinct_rows, k=st.integers(1, 50), temperature=st.floats(0.1, 3.0))
# The smallest normal float halved is subnormal, flushed to zero on XLA's CPU: a tie with 0.0 if scaled first.
@example(
    row=[0.0, 1.0, 2.0, 3.0, 1.5, 1.75, 1.625, 2.5, 0.5, 0.75, 0.25, float(np.finfo(np.float32).tiny)],
    k=11,
    temperature=2.0,
)
def test_top_k_keeps_exactly_the_k_largest(row, k, temperature):
    logits = np.asarray([row], np.float32)
    filtered = compiled_filter(logits, SamplingConfig(temperature=temperature, top_k=k))
    kept = np.isfinite(np.asarray(filtered)[0])
    largest = set(np.argsort(-np.asarray(row))[: min(k, len(row))].tolist())
    assert set(np.flatnonzero(kept).tolist()) == largest


@given(row=distinct_rows, p=st.floats(0.05, 0.99))
def test_top_p_keeps_the_fewest_most_likely_tokens_reaching_p(row, p):
    logits = np.asarray([row], np.float32)
    kept = np.isfinite(np.asarray(compiled_filter(logits, SamplingConfig(temperature=1.0, top_p=p)))[0])
    exps = np.exp(logits[0].astype(np.float64) - logits[0].max())
    probs = exps / exps.sum()
    order = np.argsort(-probs)
    mass = np.cumsum(probs[order])
    count = int(np.flatnonzero(mass >= p - 1e-6)[0]) + 1  # float32 sums: a hair of slack at the boundary
    assert count - 1 <= kept.sum() <= count + 1
    assert set(np.flatnonzero(kept).tolist()) == set(order[: kept.sum()].tolist())


@given(row=distinct_rows, k=st.integers(1, 5), p=st.floats(0.1, 1.0), seed=st.integers(0, 2**31 - 1))
def test_draws_come_from_the_kept_tokens(row, k, p, seed):
    settings = SamplingConfig(temperature=1.0, top_k=k, top_p=p, seed=seed)
    logits = np.asarray([row] * 8, np.float32)
    filtered, drawn = compiled_filter_and_next(logits, jax.random.key(seed), settings)
    kept, drawn = np.isfinite(np.asarray(filtered)[0]), np.asarray(drawn)
    assert kept[drawn].all()
    assert kept.sum() >= 1


def test_greedy_takes_the_first_of_equal_maxima():
    logits = jnp.asarray([[1.0, 3.0, 3.0, 0.0]])
    assert compiled_next(logits, jax.random.key(0), SamplingConfig()).tolist() == [1]


def test_the_apps_sampling_flags_become_the_sampling_settings_and_an_empty_stop_is_refused(capsys):
    import argparse

    from meltemi.trainer.generate.flags import add_sampling_flags, sampling_settings

    parser = argparse.ArgumentParser(prog="sample.py")
    add_sampling_flags(parser, max_new_tokens=8, temperature=0.0)
    args = parser.parse_args(["--stop", r"\n\n", "--stop", "END", "--seed", "3"])
    assert SamplingConfig(*sampling_settings(args)) == SamplingConfig(8, 0.0, None, None, 3, ("\n\n", "END"))
    with pytest.raises(SystemExit):
        parser.parse_args(["--stop", ""])
    assert capsys.readouterr().err.splitlines()[-1] == "sample.py: error: argument --stop: must not be empty"


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-new-tokens", "0", "must be positive, got 0"),
        ("--max-new-tokens", "2.5", "must be a whole number, got '2.5'"),
        ("--temperature", "-1", "must be a finite number of at least 0 (0: greedy), got -1"),
        ("--temperature", "nan", "must be a number, got nan"),
        ("--temperature", "inf", "must be a finite number of at least 0 (0: greedy), got inf"),
        ("--top-k", "0", "must be positive, got 0"),
        ("--top-p", "0", "must be in (0, 1], got 0"),
        ("--top-p", "1.5", "must be in (0, 1], got 1.5"),
        ("--top-p", "half", "must be a number, got 'half'"),
    ],
)
def test_a_bad_sampling_flag_is_a_usage_error_naming_the_flag(capsys, flag, value, message):
    """argparse refuses it in the flag's words, before anything loads (not ``SamplingConfig``'s)."""
    import argparse

    from meltemi.trainer.generate.flags import add_sampling_flags

    parser = argparse.ArgumentParser(prog="chat.py")
    add_sampling_flags(parser, max_new_tokens=8, temperature=0.0)
    with pytest.raises(SystemExit) as exit:
        parser.parse_args([flag, value])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"chat.py: error: argument {flag}: {message}"
    edges = {"--temperature": "0", "--top-p": "1", "--top-k": "1", "--max-new-tokens": "1"}
    parser.parse_args([flag, edges[flag]])  # the edge of the range is taken


@pytest.mark.parametrize(
    ("argv", "dry_run", "message"),
    [
        (["--max_new_tokens", "20"], False, "--max_new_tokens: not a flag of this command; did you mean --max-new-tokens?"),  # noqa: E501
        (["--Max-New-Tokens=20"], False, "--Max-New-Tokens: not a flag of this command; did you mean --max-new-tokens?"),  # noqa: E501
        (["--n-predict", "20"], False, "--n-predict: not a flag of this command; --n-predict (llama.cpp) is --max-new-tokens here"),  # noqa: E501
        (["--model", "runs/x"], False, "--model: not a flag of this command; --model (llama.cpp, vLLM and lm-eval) is --checkpoint here"),  # noqa: E501
        (["--system-prompt", "x"], False, "--system-prompt: not a flag of this command; --help lists them"),  # no --system here  # noqa: E501
        (["--top-kk", "4"], False, "--top-kk: not a flag of this command; did you mean --top-k?"),
        (["--trainer.seed", "3"], True, "--trainer.seed: not a flag of this command (config fields are set only with --dry-run; --help lists its flags)"),  # noqa: E501
        (["--trainer.seed", "3"], False, "--trainer.seed: not a flag of this command (config fields are set only by the commands that train; --help lists its flags)"),  # noqa: E501
        (["--seed", "1", "--bogus", "-2"], False, "--bogus: not a flag of this command; --help lists them"),  # -2 a value  # noqa: E501
        (["--steps", "1", "--n-predict"], False, "--steps: not a flag of this command; --help lists them; --n-predict: not a flag of this command; --n-predict (llama.cpp) is --max-new-tokens here"),  # noqa: E501
        (["def "], False, "unrecognized arguments: def  (the text to continue is --prompt TEXT; --help lists the flags)"),  # noqa: E501
        (["."], False, "unrecognized arguments: . (a model to read is --checkpoint .; --help lists the flags)"),  # noqa: E501
    ],
)  # fmt: skip
def test_a_word_the_app_does_not_take_is_answered_with_what_it_likely_meant(capsys, argv, dry_run, message):
    import argparse

    from meltemi.trainer.generate.flags import add_sampling_flags, refuse_unknown

    parser = argparse.ArgumentParser(prog="sample.py")
    parser.add_argument("--checkpoint")
    parser.add_argument("--prompt")
    if dry_run:
        parser.add_argument("--dry-run", action="store_true")
    add_sampling_flags(parser, max_new_tokens=8, temperature=0.0)
    _, unknown = parser.parse_known_args(argv)
    with pytest.raises(SystemExit) as exit:
        refuse_unknown(parser, unknown)
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"sample.py: error: {message}"
    refuse_unknown(parser, [])  # nothing left over: nothing said
