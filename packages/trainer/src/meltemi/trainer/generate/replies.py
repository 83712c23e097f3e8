"""A fine-tuning run's replies, as its summary shows them: the model's greedy reply to one user message,
before the run (when it began from its base) and after it, rendered by the run's chat template.

The message is ``trainer.sample_prompt``, or with ``trainer.reply_to: held_out`` the first user message of the
first held-out conversation, read back from its tokens by the run's template (``data.user_message``), so a
run on a user's own data answers a question of that data.
"""

from __future__ import annotations

from meltemi.trainer.config import RunConfig
from meltemi.trainer.data.run_data import RunData, reply_tokens
from meltemi.trainer.data.run_tokenizer import tokenizer_at
from meltemi.trainer.data.user_message import first_user_message
from meltemi.trainer.generate.chat import conversation, reply
from meltemi.trainer.generate.sampling import SamplingConfig
from meltemi.trainer.model.llama import Llama
from meltemi.trainer.step.mesh import MeshPlan


def reply_prompt(config: RunConfig, data: RunData) -> str | None:
    """The user's message a chat run's summary replies to: with ``trainer.reply_to: held_out``, the first
    user message of the first held-out conversation, else (or when no conversation is held out)
    ``trainer.sample_prompt``."""
    chat, tokenizer, ids = data.chat, config.data.tokenizer, data.held_out_prompt
    if (
        config.trainer.reply_to == "held_out"
        and chat is not None
        and tokenizer is not None
        and ids is not None
    ):
        return first_user_message(ids, tokenizer_at(tokenizer), chat.template) or None
    return config.trainer.sample_prompt


def chat_replies(
    label: str, model: Llama, prompt: str | None, config: RunConfig, data: RunData, plan: MeshPlan
) -> list[tuple[str, str]]:
    """``[(label, the model's greedy reply to prompt)]`` in a chat run (``reply_prompt``'s, as the user's
    message, rendered by the run's template), else nothing."""
    chat, tokenizer = data.chat, config.data.tokenizer
    if prompt is None or chat is None or tokenizer is None:
        return []
    completion = reply(
        model,
        tokenizer_at(tokenizer),
        chat.template,
        conversation(prompt),
        SamplingConfig(max_new_tokens=reply_tokens(config.model.max_seq_len)),
        data.end_of_text.stop_ids,
        plan=plan,
    )
    return [(label, completion.text or "")]
