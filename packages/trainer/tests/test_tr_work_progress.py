"""Progress bars over long work other than training: drawn on a terminal (as training's is), nothing in a
pipe or a log, nothing when not asked for; an evaluation's requests (``apps/evaluate.py``: the harness
model's scoring, rolling windows and generation) advance one."""

import functools
import io

import pytest
from rich.console import Console

from meltemi.trainer.run.progress import WorkProgress


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=100), out


def test_a_bar_is_drawn_at_a_terminal_only_and_only_when_enabled():
    for terminal, enabled, drawn in [(True, True, True), (False, True, False), (True, False, False)]:
        console, out = _console(terminal)
        with WorkProgress("scoring", 5, enabled=enabled, console=console) as bar:
            bar.advance(2)
            bar.advance(3)
        assert bar.done == 5 and bar.shown == drawn
        assert ("scoring" in out.getvalue() and "5/5" in out.getvalue()) == drawn, out.getvalue()
        assert drawn or out.getvalue() == ""


def test_an_evaluations_requests_advance_its_bar_when_the_model_is_asked_for_progress(monkeypatch, tmp_path):
    pytest.importorskip("lm_eval")
    import jax
    from lm_eval.api.instance import Instance

    import meltemi.trainer.harness.model as harness_model
    from meltemi.datastore import corpora
    from meltemi.trainer.config import ModelConfig
    from meltemi.trainer.model.llama import Llama

    tokenizer = corpora.train_tokenizer(corpora.python_stdlib()[:3], 300, tmp_path / "t.json")
    config = ModelConfig(vocab_size=300, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
                         max_seq_len=64, attention="reference")  # fmt: skip
    model = Llama.init(config, key=jax.random.key(0))
    console, out = _console(terminal=True)
    monkeypatch.setattr(harness_model, "WorkProgress", functools.partial(WorkProgress, console=console))
    pairs = [("def f(x):\n", "    return x"), ("import ", "os"), ("x = ", "1")]
    scored = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
    rolling = [Instance("loglikelihood_rolling", {}, ("def f(x):\n    return x\n",), 0)]
    until = {"until": ["\n"], "max_gen_toks": 4}
    generated = [Instance("generate_until", {}, (context, until), i) for i, (context, _) in enumerate(pairs)]

    quiet = harness_model.MeltemiLM(model=model, tokenizer=tokenizer, batch_size=2)
    quiet.loglikelihood(scored)
    assert out.getvalue() == ""  # the default (the training loop's evaluation): no bar
    shown = harness_model.MeltemiLM(model=model, tokenizer=tokenizer, batch_size=2, progress=True)
    shown.loglikelihood(scored)
    shown.loglikelihood_rolling(rolling)
    shown.generate_until(generated)
    drawn = out.getvalue()
    assert "scoring" in drawn and "3/3" in drawn and "scoring windows" in drawn and "1/1" in drawn, drawn
    assert "generating" in drawn, drawn
    out.truncate(0)
    shown.loglikelihood(scored, disable_tqdm=True)  # the harness's own switch turns it off
    assert out.getvalue() == ""
