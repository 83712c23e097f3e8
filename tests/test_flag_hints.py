"""Every app answers a flag it does not take through the one guesser, ``meltemi.trainer.flag_guess``: another
tool's name for one of its settings is told ours, in the same words, whichever app was given it.

Each app runs in this process (``runpy``, as ``__main__``), which is refused before anything loads; the test
watches ``flag_guess.Hint.said``, the one place a guess becomes words, and finds its words on stderr.
"""

import gc
import runpy
import sys

import pytest

from meltemi.trainer import flag_guess
from tests.app_runs import ROOT

TRAINS = "max_steps (transformers' TrainingArguments) is --trainer.num_train_steps here"
READS = "--model (llama.cpp, vLLM and lm-eval) is --checkpoint here"
WORDS = {
    "pretrain": ("--max_steps", TRAINS),
    "sft": ("--model_name_or_path", "model_name_or_path (transformers' run_clm.py) is --base here"),
    "build_stores": ("--max_steps", TRAINS),
    "sample": ("--model", READS),
    "chat": ("--model", READS),
    "evaluate": ("--model", READS),
    "export_hf": ("--model", READS),
}
"""Per app, another tool's name for one of its settings, and what every app answers it with."""


def test_every_app_is_here():
    assert sorted(WORDS) == sorted(path.stem for path in (ROOT / "apps").glob("*.py"))


@pytest.mark.parametrize("name", sorted(WORDS))
def test_every_app_answers_another_tools_flag_through_flag_guess(name, monkeypatch, capsys, tmp_path):
    word, answer = WORDS[name]
    said = []
    real = flag_guess.Hint.said

    def watched(hint, **words):
        said.append(hint)
        return real(hint, **words)

    monkeypatch.setattr(flag_guess.Hint, "said", watched)
    monkeypatch.setattr(sys, "argv", [f"apps/{name}.py", word, "x"])
    monkeypatch.chdir(tmp_path)
    try:
        with pytest.raises(SystemExit) as exit:
            runpy.run_path(str(ROOT / "apps" / f"{name}.py"), run_name="__main__")
    finally:
        gc.unfreeze()  # the apps' exit_process froze this process's heap
    assert exit.value.code in (1, 2)  # a config error, or a usage error as argparse's
    assert [hint.other for hint in said] == [answer]
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: ") or last.startswith(f"{name}.py: error: "), last
    assert last.endswith(f"{word}: not a flag of this command; {answer}") or last.endswith(
        f"{word}: neither a flag of this command nor a config field; {answer}"
    ), last
