"""How a run went, as its summary says it: the run as a whole (its steps, tokens, first and latest held-out
evaluation) and this session (where it began, what it trained, why it stopped), with the lines the command
prints of it.

>>> summary = RunSummary(Location.parse("runs/tiny"), 60, 245_760, 0, {"eval/loss": 9.081},
...     {"eval/loss": 5.949}, 1257.0, "runs/tiny/metrics.jsonl", "runs/tiny/loss.png", None, None, 0.0, 0,
...     None, 60, 245_760, 0, 60)
>>> summary.held_out_line(), summary.session_line(), summary.exit_status
('held-out loss: 9.081 at step 0 -> 5.949 at step 60', 'trained 60 steps (245,760 tokens, 1,257 tokens/s)', 0)
"""

from __future__ import annotations

import dataclasses

from meltemi.datastore.storage import Location
from meltemi.trainer.run.signals import exit_status

REPLY_LINES = 8  # lines of each reply the summary shows
PROMPT_SHOWN = 300  # characters of the message replied to that the summary shows


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """How a run went, as a whole and in this session (this call of ``run``).

    The run: ``steps`` (the step its state reached), ``tokens`` (its batches' tokens from step 0, by this
    config's batch schedule and ``data.seq_len``), ``skipped_steps``, and its first and latest held-out
    evaluations (``first_eval`` at ``first_eval_step``, step 0 for a run started afresh, read back from
    ``metrics.jsonl`` when resumed; ``last_eval`` at ``last_eval_step``; empty and None when none was made).
    This session: ``start_step`` (where it began; ``resumed_from`` the checkpoint, when resumed),
    ``session_steps``, ``session_tokens`` and ``tokens_per_second`` (evaluations not counted).
    ``stopped_by``: the signal (``"SIGTERM"``, ``"SIGINT"``) that stopped it early after a checkpoint (on
    every process of the run, whichever one it reached); ``exit_status`` the process's status for it.
    ``already_trained``: the run directory held the finished run, so nothing was compiled or trained.
    ``storage_retries``: this session's requests to buckets that met a transient error and were retried.
    ``plot_path``: the loss plot (None with ``trainer.plots`` off). ``data_notes``: what the run should know
    of its data (a source smaller than a batch, or read for many epochs: ``RunData.notes``).
    ``reply_prompt``: the user's message ``replies`` answer."""

    run_dir: Location
    steps: int
    tokens: int
    skipped_steps: int
    first_eval: dict[str, float]
    last_eval: dict[str, float]
    tokens_per_second: float
    metrics_path: str
    plot_path: str | None
    last_checkpoint: Location | None
    stopped_by: str | None
    checkpoint_seconds_blocked: float
    start_step: int
    resumed_from: Location | None
    session_steps: int
    session_tokens: int
    first_eval_step: int | None
    last_eval_step: int | None
    already_trained: bool = False
    replies: tuple[tuple[str, str], ...] = ()
    sources: tuple[str, ...] = ()
    chat_sources: tuple[str, ...] = ()
    storage_retries: int = 0
    data_notes: tuple[str, ...] = ()
    reply_prompt: str | None = None

    def reply_lines(self, prompt: str | None = None) -> list[str]:
        """A chat run's replies to ``prompt`` (default ``reply_prompt``; before fine-tuning, when this session
        began from the base, and after), one labelled line each; none for a run without them."""
        if not self.replies:
            return []
        prompt = self.reply_prompt if prompt is None else prompt
        shown = prompt if len(prompt) <= PROMPT_SHOWN else prompt[:PROMPT_SHOWN] + "..."
        lines = [f"reply (greedy) to {shown!r}:"]
        width = max(len(label) for label, _ in self.replies)
        for label, text in self.replies:
            shown = text.strip().splitlines()[:REPLY_LINES] or ["(no reply: it ended the turn at once)"]
            if len(text.strip().splitlines()) > REPLY_LINES:
                shown[-1] += " ..."
            lines.append(f"  {label + ':':<{width + 1}} {shown[0]}")
            lines += [" " * (width + 4) + line for line in shown[1:]]
        return lines

    @property
    def exit_status(self) -> int:
        """What the process should exit with: 0 when the run reached its last step (or had already), 130
        after a SIGINT stopped it, 143 after a SIGTERM (128 plus the signal's number, as shells report it),
        so a scheduler can tell a stopped run from a finished one."""
        return exit_status(self.stopped_by)

    def session_line(self) -> str:
        """What this session did: ``trained 60 steps (245,760 tokens, 1,257 tokens/s)`` from step 0, else
        ``resumed at step 40: this session trained 20 steps (81,920 tokens, 1,257 tokens/s)``."""
        trained = (
            f"trained {self.session_steps} steps ({self.session_tokens:,} tokens, "
            f"{self.tokens_per_second:,.0f} tokens/s)"
        )
        if self.start_step == 0:
            return trained
        began = "resumed" if self.resumed_from is not None else "started"
        return f"{began} at step {self.start_step}: this session {trained}"

    def held_out_line(self) -> str:
        """``held-out loss: 9.081 at step 0 -> 5.949 at step 60`` (the run's first and latest evaluation; a
        chat run's is the loss of the assistant's tokens), then each source's when there are several (a chat
        source's being its assistant tokens': ``(chat, assistant tokens: 7.186 -> 4.791; text: 4.167 ->
        4.102)``), and the latest of the average of the weights when the run keeps one (``; EMA weights:
        5.871``, ``eval/ema/loss``), or an empty string when the run has none."""
        first, last = self.first_eval.get("eval/loss"), self.last_eval.get("eval/loss")
        if first is None or last is None:
            return ""
        every_chat = bool(self.chat_sources) and set(self.sources) <= set(self.chat_sources)
        what = "held-out assistant loss" if every_chat else "held-out loss"
        line = (
            f"{what}: {first:.3f} at step {self.first_eval_step} -> {last:.3f} at step {self.last_eval_step}"
        )
        averaged = self.last_eval.get("eval/ema/loss")
        ema = "" if averaged is None else f"; EMA weights: {averaged:.3f}"
        if len(self.sources) < 2:
            return line + ema
        each = []
        for name in self.sources:
            began, now = self.first_eval.get(f"eval/{name}/loss"), self.last_eval.get(f"eval/{name}/loss")
            if began is not None and now is not None:
                label = f"{name}, assistant tokens" if name in self.chat_sources and not every_chat else name
                each.append(f"{label}: {began:.3f} -> {now:.3f}")
        return (f"{line} ({'; '.join(each)})" if each else line) + ema


def evaluations(records: list[dict], through: int) -> list[tuple[int, dict[str, float]]]:
    """The held-out evaluations of ``metrics.jsonl`` records up to step ``through``, with their steps."""
    return [
        (r["step"], {k: float(v) for k, v in r.items() if k.startswith("eval/")})
        for r in records
        if "eval/loss" in r and r["step"] <= through
    ]
