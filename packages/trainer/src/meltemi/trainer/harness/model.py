"""``MeltemiLM``: lm-evaluation-harness's model interface over the JAX model, registered as ``meltemi``.

It scores as the harness's Hugging Face model (``hf``) scores the exported checkpoint: the same
tokenization (no special tokens added), the end-of-text token as the context of an empty prompt, the same
truncation to ``max_length`` and the same rolling windows; so the two agree to float tolerance. Scoring goes
through ``TokenScorer`` (a few compiled shapes, rows split over the mesh); ``generate_until`` through
``meltemi.trainer.generate.generation`` (a KV cache; greedy unless the task samples).

From the command line: ``lm_eval --model meltemi --model_args checkpoint=runs/tiny,batch_size=16`` after
``import meltemi.trainer.harness.model`` (``apps/evaluate.py`` does both). A chat model (a checkpoint that
records a chat template) supports ``--apply_chat_template``: prompts are rendered by its template as the
``hf`` model renders them with the export's, generation stops at the end of the assistant's turn, and an
empty context starts from the template's beginning-of-text token, as ``hf`` starts it.

>>> import jax, tempfile
>>> from meltemi.datastore import corpora
>>> from meltemi.trainer.config import ModelConfig
>>> from meltemi.trainer.model.llama import Llama
>>> tokenizer = corpora.train_tokenizer(corpora.python_stdlib()[:3], 300, tempfile.mkdtemp() + "/t.json")
>>> config = ModelConfig(vocab_size=300, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
...                      max_seq_len=64, attention="reference")
>>> lm = MeltemiLM(model=Llama.init(config, key=jax.random.key(0)), tokenizer=tokenizer)
>>> from lm_eval.api.instance import Instance
>>> request = Instance("loglikelihood", {}, ("def f(x):\\n", "    return x"), 0)
>>> logprob, greedy = lm.loglikelihood([request], disable_tqdm=True)[0]
>>> logprob < 0, greedy
(True, False)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tokenizers import Tokenizer

from meltemi.trainer.data.run_tokenizer import end_of_text, tokenizer_at
from meltemi.trainer.generate.generation import generate
from meltemi.trainer.generate.sampling import SamplingConfig
from meltemi.trainer.harness.errors import EvalError, NoTokenizerError
from meltemi.trainer.harness.scoring import TokenScorer
from meltemi.trainer.model.llama import Llama
from meltemi.trainer.run.progress import WorkProgress
from meltemi.trainer.step.mesh import MeshPlan

if TYPE_CHECKING:
    from meltemi.datastore.chat.recipe import ChatRecipe

DEFAULT_MAX_GEN_TOKS = 256


def read_tokenizer(path: str | os.PathLike | None, where: str) -> Tokenizer:
    """The tokenizer at ``path``; a ``NoTokenizerError`` naming ``where`` when there is none to read."""
    if path is None:
        raise NoTokenizerError(f"{where}: its config names no data.tokenizer to turn text into tokens")
    return tokenizer_at(path, NoTokenizerError, where)


# generate_until pads each batch's prompts to a multiple of this many tokens (and every batch to the scorer's
# rows), so a task compiles a few programs, not one per batch.
PROMPT_MULTIPLE = 64


@register_model("meltemi")
class MeltemiLM(TemplateLM):
    """A Meltemi model as a harness ``LM``: from ``checkpoint`` (a run directory's latest good checkpoint, or
    a ``step-N`` directory), or from ``model`` and ``tokenizer`` in memory (the training loop's, with its
    ``plan`` and ``compute_dtype``).

    A checkpoint is held and computed in ``dtype`` when given (``--model_args checkpoint=...,dtype=float32``,
    as the harness's ``hf`` model takes it), else in its run's dtypes; ``weights`` picks the run's moving
    average of its weights (``ema``, the default when it kept one) or them as trained (``raw``), as
    ``load_model`` does. ``batch_size`` rows are scored per
    compiled call; ``max_length`` (default: the model's ``max_seq_len``)
    bounds a row. A checkpoint is evaluated on every device, its parameters sharded over them as
    ``load_model`` lays them out and each batch's rows split between them. With ``progress`` a bar on a
    terminal shows the requests scored or generated (``run.progress.WorkProgress``; ``apps/evaluate.py``).
    """

    def __init__(
        self,
        checkpoint: str | os.PathLike | None = None,
        *,
        model: Llama | None = None,
        tokenizer: Tokenizer | str | os.PathLike | None = None,
        chat: ChatRecipe | None = None,
        plan: MeshPlan | None = None,
        compute_dtype: str | None = None,
        dtype: str | None = None,
        weights: str | None = None,
        batch_size: int | str = 8,
        max_length: int | None = None,
        max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
        progress: bool = False,
        **ignored,
    ):
        super().__init__()
        if (checkpoint is None) == (model is None):
            raise EvalError("give the harness model either checkpoint= or model=, not both")
        if checkpoint is not None:
            model, tokenizer, compute_dtype, plan, ending, chat = self._from_checkpoint(
                checkpoint, dtype, weights
            )
        else:
            if not isinstance(tokenizer, Tokenizer):
                tokenizer = read_tokenizer(tokenizer, "the model given")
            ending = end_of_text(tokenizer, end_of_turn=None if chat is None else chat.turn_end)
        self.tokenizer_ = tokenizer
        if ending.id is None:
            raise NoTokenizerError("the tokenizer has no end-of-text token to start an empty context with")
        self._eot, self._stops, self.chat = ending.id, ending.stop_ids, chat
        self.template = None if chat is None else chat.template
        bos = None if self.template is None else self.template.special_tokens.get("bos_token")
        self._prefix = self._eot if bos is None else tokenizer.token_to_id(bos)
        self.model, self.plan = model, plan
        self.max_gen_toks = int(max_gen_toks)
        self.progress = progress is True or str(progress).lower() == "true"  # --model_args progress=True
        if str(batch_size).startswith("auto"):
            raise EvalError("batch_size auto is not supported: give a number of rows (default 8)")
        self.scorer = TokenScorer(
            model,
            batch_size=int(batch_size),
            max_length=None if max_length is None else int(max_length),
            compute_dtype=compute_dtype or "float32",
            plan=plan,
        )

    @staticmethod
    def _from_checkpoint(location, dtype: str | None = None, weights: str | None = None):
        from meltemi.trainer.checkpoint.trained_model import load_model
        from meltemi.trainer.step import compile_cache

        trained = load_model(location, dtype=dtype, weights=weights)  # the run's tokenizer, end of text
        compile_cache.enable_for(trained.config.trainer)
        tokenizer = read_tokenizer(trained.tokenizer, str(trained.checkpoint))
        dtype = trained.config.trainer.compute_dtype
        plan = trained.layout.plan
        return trained.model, tokenizer, dtype, plan, trained.end_of_text, trained.chat

    # ---- what TemplateLM asks of a model -------------------------------------------------------------------

    @property
    def eot_token_id(self) -> int:
        return self._eot

    @property
    def prefix_token_id(self) -> int:
        """What an empty context starts from: a chat template's beginning-of-text token, else the end of
        text (as the ``hf`` model chooses for the export)."""
        return self._prefix

    @property
    def tokenizer_name(self) -> str:
        """Names the tokenizer and template for the harness's request caches."""
        digest = hashlib.sha256(self.tokenizer_.to_str().encode())
        digest.update(b"" if self.template is None else self.template.text.encode())
        return f"meltemi-{digest.hexdigest()[:16]}"

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        """The model's chat template when asked for (``--apply_chat_template``); a chat template for a model
        that has none is an ``EvalError``."""
        if chat_template is False or chat_template is None:
            return None
        if self.template is None:
            raise EvalError(
                "--apply_chat_template: this model has no chat template (it was not fine-tuned for chat: "
                "apps/sft.py)"
            )
        return self.template.text

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """``chat_history`` rendered by the model's template: with the assistant's turn begun, or, with
        ``add_generation_prompt`` off, its last (assistant) message left open to be continued."""
        if self.template is None:
            self.chat_template(True)
        rendered = self.template.render(
            chat_history,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
            **self.template.special_tokens,
        )
        return rendered.text

    @property
    def max_length(self) -> int:
        return self.scorer.max_length

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return self.tokenizer_.encode(string, add_special_tokens=False).ids

    def tok_decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer_.decode(list(tokens))

    def _bar(self, label: str, total: int, disable_tqdm: bool = False) -> WorkProgress:
        """The progress of ``total`` requests, shown when this model was asked for it."""
        return WorkProgress(label, total, enabled=self.progress and not disable_tqdm)

    def _loglikelihood_tokens(self, requests, disable_tqdm=False, **kwargs) -> list[tuple[float, bool]]:
        with self._bar("scoring", len(requests), disable_tqdm) as bar:
            scores = self.scorer.score(
                [(context, continuation) for _, context, continuation in requests], bar.advance
            )
        for (key, _, _), score in zip(requests, scores, strict=True):
            self.cache_hook.add_partial("loglikelihood", key, (score.logprob, score.greedy))
        return [(s.logprob, s.greedy) for s in scores]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Each text's whole log-likelihood, in windows of ``max_length`` tokens (each token scored once)."""
        windows, owners = [], []
        for i, (text,) in enumerate(request.args for request in requests):
            for context, continuation in map(
                make_disjoint_window,
                get_rolling_token_windows(
                    token_list=self.tok_encode(text),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                ),
            ):
                windows.append((context, continuation))
                owners.append(i)
        totals = [0.0] * len(requests)
        with self._bar("scoring windows", len(windows), disable_tqdm) as bar:
            scored = self.scorer.score(windows, bar.advance)
        for owner, score in zip(owners, scored, strict=True):
            totals[owner] += score.logprob
        for request, total in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Continue each context until one of its stop strings (or the end-of-text token), batched by
        settings; greedy unless the task asks for sampling."""
        eos_text = self.tokenizer_.decode([self._eot], skip_special_tokens=False)
        groups: dict[str, list[int]] = {}
        for i, request in enumerate(requests):
            groups.setdefault(repr(sorted(request.args[1].items())), []).append(i)
        out: list[str] = [""] * len(requests)
        with self._bar("generating", len(requests), disable_tqdm) as bar:
            for members in groups.values():
                kwargs = normalize_gen_kwargs(requests[members[0]].args[1], self.max_gen_toks)
                until = tuple(handle_stop_sequences(kwargs.pop("until", None), eos=eos_text))
                max_new = kwargs.pop("max_gen_toks")
                room = self.max_length - max_new
                if room < 1:
                    raise EvalError(
                        f"max_gen_toks {max_new} leaves no room for a context in {self.max_length}"
                    )
                settings = SamplingConfig(
                    max_new_tokens=max_new,
                    temperature=float(kwargs.get("temperature", 0.0)) if kwargs.get("do_sample") else 0.0,
                    stop_strings=until,
                )
                prompts = {i: self.tok_encode(requests[i].args[0])[-room:] or [self._eot] for i in members}
                ordered = sorted(members, key=lambda i: -len(prompts[i]))
                for start in range(0, len(ordered), self.scorer.rows):
                    chunk = ordered[start : start + self.scorer.rows]
                    result = generate(
                        self.model,
                        [prompts[i] for i in chunk],
                        settings,
                        tokenizer=self.tokenizer_,
                        eos_token_id=self._stops,
                        plan=self.plan,
                        prompt_multiple=PROMPT_MULTIPLE,
                        min_rows=self.scorer.rows,
                    )
                    for i, completion in zip(chunk, result.completions, strict=True):
                        out[i] = completion.text or ""
                        self.cache_hook.add_partial("generate_until", requests[i].args, out[i])
                    bar.advance(len(chunk))
        return out
