"""A chat model's reply: the conversation rendered by the run's chat template with the assistant's header
appended (``add_generation_prompt``), tokenized once as the template wrote it (no token added), and
continued until the end of the turn (or of the text) or ``max_new_tokens``. Tool definitions given
(``tools``, as ``apply_chat_template(..., tools=...)`` takes them) are rendered by the template for the
model, which may answer with a call in its template's layout.

The prompt's tokens are what ``transformers``' ``apply_chat_template(..., add_generation_prompt=True)``
gives on the exported tokenizer, so a reply here and a reply of the export loaded in transformers begin
from the same ids.

>>> import jax
>>> from meltemi.datastore.chat.template import ChatTemplate
>>> from meltemi.trainer.config import ModelConfig
>>> from meltemi.trainer.model.llama import Llama
>>> from tokenizers import Tokenizer, models
>>> tokenizer = Tokenizer(models.WordLevel({"hi": 0, "<unk>": 1}, unk_token="<unk>"))
>>> _ = tokenizer.add_special_tokens(["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
...                                   "<|eot_id|>"])
>>> template = ChatTemplate.llama3()
>>> len(chat_prompt_ids(template, tokenizer, [{"role": "user", "content": "hi"}])) > 4
True
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from meltemi.trainer.data.run_tokenizer import tokenizer_at
from meltemi.trainer.generate.chat_files import Message, Tools
from meltemi.trainer.generate.generation import (
    Completion,
    GenerationError,
    generate,
    no_tokenizer,
    padded_length,
)
from meltemi.trainer.generate.sampling import ConversationTooLongError, SamplingConfig
from meltemi.trainer.model.llama import Llama
from meltemi.trainer.step.mesh import MeshPlan

if TYPE_CHECKING:
    from meltemi.datastore.chat.template import ChatTemplate

REPLIED_TO = ("user", "tool")  # the roles whose message the assistant answers


def conversation(message: str, system: str | None = None, history: Sequence[Message] = ()) -> list[Message]:
    """The messages of a chat so far and the user's new ``message``, after an optional ``system`` one.

    >>> conversation("hi", system="be brief")
    [{'role': 'system', 'content': 'be brief'}, {'role': 'user', 'content': 'hi'}]
    """
    return with_system(system, [*history, {"role": "user", "content": message}])


def with_system(system: str | None, messages: Sequence[Message]) -> list[Message]:
    """``messages`` after a ``system`` message, when there is one.

    >>> with_system(None, [{"role": "user", "content": "hi"}])
    [{'role': 'user', 'content': 'hi'}]
    """
    return [*([] if system is None else [{"role": "system", "content": system}]), *messages]


def chat_prompt_ids(
    template: ChatTemplate, tokenizer: Tokenizer, messages: Sequence[Message], tools: Tools | None = None
) -> list[int]:
    """The ids of ``messages`` rendered by ``template`` (given ``tools`` when there are) with the assistant's
    turn begun: the chat room's one encode path (``encode_conversation``), as a store's conversations are."""
    from meltemi.datastore.chat.build import encode_conversation
    from meltemi.datastore.chat.recipe import ChatRecipe

    recipe = ChatRecipe(template)
    return encode_conversation(tokenizer, recipe, messages, tools=tools, add_generation_prompt=True).ids


def reply(
    model: Llama,
    tokenizer: Tokenizer,
    template: ChatTemplate,
    messages: Sequence[Message],
    settings: SamplingConfig,
    stop_ids: Sequence[int],
    *,
    plan: MeshPlan | None = None,
    write: Callable[[str], object] | None = None,
    tools: Tools | None = None,
) -> Completion:
    """The assistant's reply to ``messages`` (the model shown ``tools`` when given): its tokens (the
    end-of-turn token last when it stopped there) and its text without it; with ``write``, the text is
    written as it grows."""
    ids = chat_prompt_ids(template, tokenizer, messages, tools)
    room = model.config.max_seq_len - settings.max_new_tokens
    if len(ids) > room:
        raise ConversationTooLongError(
            f"the conversation is {len(ids)} tokens; with max_new_tokens {settings.max_new_tokens} "
            "it exceeds "
            f"model.max_seq_len ({model.config.max_seq_len}): shorten it or ask for fewer new tokens"
        )
    result = generate(
        model,
        [ids],
        settings,
        tokenizer=tokenizer,
        eos_token_id=tuple(stop_ids),
        plan=plan,
        write=write,
        prompt_multiple=padded_length(len(ids)),
    )
    return result.completions[0]


class ChatSession:
    """A conversation with a trained chat model (laid out by ``plan`` when given): each ``say`` adds the
    user's message (or a tool's result, ``role="tool"``), renders the whole conversation, and adds and
    returns the assistant's reply (``last`` keeps its tokens and why it stopped). ``go_on`` takes up a
    conversation held elsewhere (``chat_files.read_conversation``'s), and ``answer`` replies to it as it
    stands.

    A conversation that outgrows the model's positions is a ``ConversationTooLongError`` that changes
    nothing; with ``forget_oldest``, as chat programs do, the oldest exchanges (a user's message and all that
    follows it up to the next) are left out of the prompt instead (the system message is kept) until it
    fits, and ``forgotten`` counts them (``transcript`` still holds them). A message that does not fit even
    alone is refused either way. ``clear`` starts a new conversation.
    ``tools`` are shown to the model at every turn; a template that never reads them is a
    ``GenerationError``.
    """

    def __init__(
        self,
        model: Llama,
        tokenizer: Tokenizer,
        template,
        stop_ids: Sequence[int],
        settings: SamplingConfig,
        *,
        system: str | None = None,
        plan: MeshPlan | None = None,
        forget_oldest: bool = False,
        tools: Tools | None = None,
    ):
        if tools is not None and not template.reads_tools:
            raise GenerationError(
                f"chat template {template.source}: it never reads tools, so the model would not be shown "
                "them; use a model whose template renders tools (a Hugging Face chat model's own)"
            )
        self.model, self.tokenizer, self.template, self.plan = model, tokenizer, template, plan
        self.tools = tools
        self.stop_ids, self.settings, self.system = tuple(stop_ids), settings, system
        self.forget_oldest = forget_oldest
        self.history: list[Message] = []  # what the next prompt shows, after the system message
        self.left_out: list[Message] = []  # the oldest exchanges, no longer shown
        self.forgotten = 0
        self.last: Completion | None = None

    @classmethod
    def of_checkpoint(
        cls,
        location: str | os.PathLike,
        settings: SamplingConfig,
        *,
        system: str | None = None,
        forget_oldest: bool = False,
        warn=None,
        dtype: str | None = None,
        tools: Tools | None = None,
        weights: str | None = None,
    ) -> ChatSession:
        """A session with a run directory's latest good checkpoint (or a ``step-N`` directory), rendered
        with the chat template the checkpoint records (the model in ``dtype`` when given, shown ``tools``;
        ``weights``: the run's moving average of its weights or them as trained, ``load_model``'s); a
        ``GenerationError`` when it records none."""
        from meltemi.trainer.checkpoint.trained_model import load_model
        from meltemi.trainer.step import compile_cache

        trained = load_model(location, **({"warn": warn} if warn else {}), dtype=dtype, weights=weights)
        compile_cache.enable_for(trained.config.trainer)
        if trained.chat is None:
            held = (
                "its directory has no chat_template.jinja, nor a chat_template in tokenizer_config.json"
                if trained.hugging_face
                else "its checkpoint records no chat template"
            )
            raise GenerationError(
                f"{trained.checkpoint}: not a chat model ({held}); fine-tune it first: uv run apps/sft.py "
                f"--base {trained.checkpoint}"
            )
        if trained.tokenizer is None:
            raise no_tokenizer(trained.checkpoint)
        tokenizer = tokenizer_at(trained.tokenizer, GenerationError)
        template = trained.chat.template  # the recipe the run was trained with: its template, as recorded
        stops = trained.end_of_text.stop_ids
        return cls(
            trained.model,
            tokenizer,
            template,
            stops,
            settings,
            system=system,
            plan=trained.layout.plan,
            forget_oldest=forget_oldest,
            tools=tools,
        )

    def go_on(self, messages: Sequence[Message]) -> None:
        """Take up the conversation ``messages`` (a system message first becomes the session's), replacing
        what was said so far; a ``GenerationError`` when the session already has another system message."""
        messages = list(messages)
        if messages and messages[0]["role"] == "system":
            if self.system is not None and self.system != messages[0]["content"]:
                raise GenerationError(
                    "the conversation opens with its own system message: give it there or with --system, "
                    "not both"
                )
            self.system, messages = messages[0]["content"], messages[1:]
        self.history, self.left_out = messages, []

    def clear(self) -> None:
        """Start a new conversation: what was said is forgotten; the system message and tools stay."""
        self.history, self.left_out, self.last = [], [], None

    @property
    def transcript(self) -> list[Message]:
        """The whole conversation so far, the system message first and the exchanges left out of the
        prompt included: what ``chat_files.write_conversation`` saves."""
        return with_system(self.system, [*self.left_out, *self.history])

    @property
    def awaits_reply(self) -> bool:
        """Whether the conversation ends with a message the assistant has not answered yet."""
        return bool(self.history) and self.history[-1]["role"] in REPLIED_TO

    def say(self, message: str, write: Callable[[str], object] | None = None, role: str = "user") -> str:
        """The assistant's reply to ``message`` (the user's, or a tool's result), after everything said so
        far (or its latest exchanges); with ``write``, its text is written as it grows."""
        if role not in REPLIED_TO:
            raise GenerationError(f"a message the assistant replies to is a user's or a tool's, not {role!r}")
        return self._reply_to([*self.history, {"role": role, "content": message}], write)

    def answer(self, write: Callable[[str], object] | None = None) -> str:
        """The assistant's reply to the conversation as it stands (``awaits_reply``)."""
        if not self.awaits_reply:
            last = f"the {self.history[-1]['role']}'s message" if self.history else "nothing"
            raise GenerationError(f"nothing to reply to: the conversation ends with {last}")
        return self._reply_to(self.history, write)

    def _reply_to(self, history: list[Message], write: Callable[[str], object] | None) -> str:
        kept, forgotten = history, 0
        while True:
            messages = with_system(self.system, kept)
            try:
                self.last = reply(
                    self.model, self.tokenizer, self.template, messages, self.settings, self.stop_ids,
                    plan=self.plan, write=write, tools=self.tools,
                )  # fmt: skip
                break
            except ConversationTooLongError:
                shorter = _without_oldest_exchange(kept)
                if not (self.forget_oldest and shorter):
                    raise  # the conversation as it was: a message too long alone forgets nothing
                kept, forgotten = shorter, forgotten + 1
        self.forgotten += forgotten
        self.left_out += history[: len(history) - len(kept)]
        text = self.last.text or ""
        self.history = [*kept, {"role": "assistant", "content": text}]
        return text


def _without_oldest_exchange(history: list[Message]) -> list[Message]:
    """``history`` from its second user's message on (empty when it holds one user's message or none).

    >>> said = [{"role": r, "content": ""} for r in ("user", "assistant", "tool", "assistant", "user")]
    >>> [m["role"] for m in _without_oldest_exchange(said)]
    ['user']
    """
    users = [i for i, message in enumerate(history) if message["role"] == "user" and i > 0]
    return history[users[0] :] if users else []
