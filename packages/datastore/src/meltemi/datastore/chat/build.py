"""Conversations to tokens and loss weights, the one encode path of the chat room: rendered once by the
chat template, tokenized once, the assistant's tokens found from the template's generation blocks, as
transformers finds them, or, for a template without them, from renders of each conversation's beginnings
(`turns`). A chat store's build (`encode_conversations`), a chat model's prompt and the parity tests with
transformers (`encode_conversation`) all go through it.

A conversation (`conversations.Conversation`, or messages) is rendered with the recipe's template
(`template.ChatTemplate`), its text tokenized as one string (special tokens as written, none added, the
tokenizer's truncation and padding ignored), and each token weighed 1 where transformers'
`return_assistant_tokens_mask` marks it (`loss_on="assistant"`) or everywhere (`loss_on="all"`); in a prompt
and its completion, the assistant's tokens of the completion only. Each run of trained tokens must hold the
end-of-turn token (`ChatRecipe.turn_end`), so that a model learns to stop; it may go on after it (a newline
after `<|im_end|>` inside a generation block is trained, as transformers marks it). A template whose blocks
leave it out is refused, naming the first conversation it renders so. In a store, a conversation longer
than `max_tokens` is cut to it (`overlong="truncate"`) or left out (`"drop"`), counted either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Encoding, Tokenizer

from meltemi.datastore.build.inputs.sources import ReadNotes, ReadPolicy
from meltemi.datastore.chat.conversations import Conversation, tool_call_names
from meltemi.datastore.chat.recipe import ChatRecipe
from meltemi.datastore.chat.template import ChatTemplate, RenderedChat, assistant_mask
from meltemi.datastore.chat.turns import NAME_IT, turns_by_beginnings
from meltemi.datastore.errors import BadLineError, ChatTemplateError

GIVEN = "the conversation"  # where messages given alone are, for messages


@dataclass(frozen=True)
class EncodedChat:
    """A conversation encoded: its rendered `text`, its token `ids` and each token's loss `weights` (uint8,
    1 where trained)."""

    text: str
    ids: list[int]
    weights: np.ndarray


@dataclass
class EncodedChats:
    """Conversations as one token stream: `tokens` and `weights` joined, and each one's `lengths`."""

    tokens: np.ndarray
    weights: np.ndarray
    lengths: np.ndarray


def encode_conversation(
    tokenizer: Tokenizer,
    recipe: ChatRecipe,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> EncodedChat:
    """`messages` (shown `tools` when given) rendered by `recipe`'s template, tokenized and weighed as a
    chat store weighs them. With `add_generation_prompt` it is a prompt, the assistant's turn begun: its
    weights are the template's generation blocks' (as transformers marks them), none for a template without
    blocks (a prompt trains nothing), and no turn is checked.

    >>> from tokenizers import models, pre_tokenizers
    >>> tokenizer = Tokenizer(models.WordLevel({"Hi": 0, "Hey": 1, "<unk>": 2}, unk_token="<unk>"))
    >>> tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> _ = tokenizer.add_special_tokens(["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
    ...                                   "<|eot_id|>"])
    >>> recipe = ChatRecipe(ChatTemplate.llama3())
    >>> chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]
    >>> encoded = encode_conversation(tokenizer, recipe, chat)
    >>> [tokenizer.id_to_token(i) for i, w in zip(encoded.ids, encoded.weights) if w]
    ['Hey', '<|eot_id|>']
    """
    given = None if tools is None else tuple(tools)
    conversation = Conversation(tuple(dict(m) for m in messages), GIVEN, tools=given)
    return _encoded(tokenizer, recipe, [conversation], add_generation_prompt)[0]


def encode_conversations(
    tokenizer: Tokenizer,
    conversations: Sequence[Conversation],
    chat: ChatRecipe,
    dtype: np.dtype,
    policy: ReadPolicy,
    notes: ReadNotes,
) -> EncodedChats:
    """A chat store's part: `conversations` encoded as `encode_conversation` encodes each (one
    `encode_batch` call for all), then joined; refusals, cuts and drops are counted in `notes` (a
    conversation without an assistant token is a `BadLineError` naming it, unless the policy skips bad
    lines)."""
    tokens, weights, lengths = [], [], []
    for conversation, encoded in zip(conversations, _encoded(tokenizer, chat, conversations), strict=True):
        ids, mask = np.asarray(encoded.ids, dtype), encoded.weights
        if not mask.any():
            why = "no assistant token to train on (no assistant message, or only empty ones)"
            if _refuse(conversation, why, policy, notes):
                continue
        if chat.max_tokens is not None and len(ids) > chat.max_tokens:
            ids, mask = ids[: chat.max_tokens], mask[: chat.max_tokens]
            if chat.overlong == "drop" or not mask.any():  # cut, nothing would be left to train on
                notes.counts["dropped_conversations"] += 1
                continue
            notes.counts["truncated_conversations"] += 1
        tokens.append(ids)
        weights.append(mask)
        lengths.append(len(ids))
    return EncodedChats(
        np.concatenate(tokens) if tokens else np.zeros(0, dtype),
        np.concatenate(weights) if weights else np.zeros(0, np.uint8),
        np.array(lengths, np.int64),
    )


def _encoded(
    tokenizer: Tokenizer,
    recipe: ChatRecipe,
    conversations: Sequence[Conversation],
    add_generation_prompt: bool = False,
) -> list[EncodedChat]:
    """The encode path: each conversation rendered (a failing one named), all tokenized in one
    `encode_batch`, each weighed, and each run of trained tokens checked for the end of turn."""
    rendered = []
    for conversation in conversations:
        try:
            rendered.append(_rendered(recipe, conversation, add_generation_prompt))
        except ChatTemplateError as e:
            raise ChatTemplateError(f"{conversation.place}: {e}") from None
    encodings = _whole(tokenizer).encode_batch([r.text for r in rendered], add_special_tokens=False)
    checked = recipe.loss_on == "assistant" and not add_generation_prompt
    stops = [recipe.turn_end, recipe.template.special_tokens.get("eos_token")] if checked else []
    stop_ids = [i for i in (tokenizer.token_to_id(t) for t in stops if t) if i is not None]
    encoded = []
    for conversation, chat_text, encoding in zip(conversations, rendered, encodings, strict=True):
        if recipe.loss_on == "all":
            weights = np.ones(len(encoding.ids), np.uint8)
        else:
            weights = assistant_mask(encoding, chat_text.generation_spans)
        if checked:
            _check_turn_ends(encoding, weights, stop_ids, recipe, conversation)
        encoded.append(EncodedChat(chat_text.text, list(encoding.ids), weights))
    return encoded


def _whole(tokenizer: Tokenizer) -> Tokenizer:
    """The tokenizer, or a copy without its truncation and padding: transformers tokenizes a conversation
    whole whatever its `tokenizer.json` sets."""
    if tokenizer.truncation is None and tokenizer.padding is None:
        return tokenizer
    copy = type(tokenizer).from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def _rendered(recipe: ChatRecipe, conversation: Conversation, add_generation_prompt: bool) -> RenderedChat:
    """A conversation rendered, with the spans of its assistant's turns (its completion's only when it has a
    prompt: the prompt's messages render to the start of the text, as they do alone, and no span before its
    end is kept); a prompt (`add_generation_prompt`) with its generation blocks' spans only."""
    template, messages = recipe.template, conversation.messages
    tools = {} if conversation.tools is None else {"tools": list(conversation.tools)}
    if tools and not template.reads_tools:
        raise ChatTemplateError(
            f"chat template {template.source}: it never reads the conversation's tools, so a model would "
            "learn to call tools it was never shown; use a template that renders them, such as the model's "
            "own (a tokenizer directory)"
        )
    if add_generation_prompt:
        return template.render(messages, add_generation_prompt=True, **tools)
    if recipe.loss_on == "all" or template.has_generation_blocks:
        whole = template.render(messages, **tools)
    else:
        whole = turns_by_beginnings(
            template, messages, recipe.turn_end, conversation.prompt_messages, **tools
        )
    _check_tool_calls(template, conversation, whole)
    if not conversation.prompt_messages:
        return whole
    prompt = template.render(messages[: conversation.prompt_messages], **tools)
    if not whole.text.startswith(prompt.text):
        raise ChatTemplateError(
            f"chat template {template.source}: the prompt renders otherwise when its completion follows, so "
            "the completion's tokens cannot be told apart from the prompt's; give the conversation as "
            "messages instead"
        )
    end = len(prompt.text)
    return RenderedChat(whole.text, tuple((max(a, end), b) for a, b in whole.generation_spans if b > end))


def _check_tool_calls(template: ChatTemplate, conversation: Conversation, rendered: RenderedChat) -> None:
    """A template that leaves a message's tool calls out of what it trains (the generation blocks, when it
    has them; the shipped one writes only content) would teach turns without them: refused, naming the
    message."""
    messages = enumerate(conversation.messages, start=1)
    calls = [(number, name) for number, message in messages for name in tool_call_names(message, number)]
    if not calls:
        return  # the common case: nothing to look for, no text gathered
    spans = rendered.generation_spans or ((0, len(rendered.text)),)
    trained = "\n".join(rendered.text[a:b] for a, b in spans)
    for number, name in calls:
        if name not in trained:
            raise ChatTemplateError(
                f"chat template {template.source}: it does not write message {number}'s tool call "
                f"({name!r} is not in what it renders to train on); use a template that renders "
                "tool_calls, such as the model's own (a tokenizer directory)"
            )


def _refuse(conversation: Conversation, why: str, policy: ReadPolicy, notes: ReadNotes) -> bool:
    """Skip a conversation the build cannot train on (noted; True), or stop at it (a `BadLineError`)."""
    problem = f"{conversation.place}: {why}"
    if not policy.skip_bad_lines:
        raise BadLineError(problem)
    notes.counts["refused_conversations"] += 1
    notes.skipped_lines.append(problem)
    return True


def _check_turn_ends(
    encoding: Encoding,
    weights: np.ndarray,
    stop_ids: Sequence[int],
    recipe: ChatRecipe,
    conversation: Conversation,
) -> None:
    """Every run of trained tokens must hold a token generation stops at (`stop_ids`: the end of turn, or
    the eos, which some templates write after the last turn instead), or the model would never learn to
    stop (what follows it in the run, such as a newline, is trained too, as transformers marks it): a
    template whose generation blocks leave it out is refused."""
    edges = np.diff(np.concatenate([[0], weights.astype(np.int8), [0]]))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if not len(starts):
        return
    ends = np.concatenate([[0], np.cumsum(np.isin(np.asarray(encoding.ids), stop_ids))])
    empty = np.flatnonzero(ends[stops] == ends[starts])
    if not len(empty):
        return
    first = int(starts[empty[0]])
    trained = encoding.offsets[first][0]
    held = "trained text" if not recipe.template.has_generation_blocks else "{% generation %} block"
    raise ChatTemplateError(
        f"chat template {recipe.template.source}: an assistant turn's {held} holds no {recipe.turn_end} "
        f"(first at {conversation.place}, character {trained}), so a model trained on it would never learn "
        f"to stop; put {recipe.turn_end} inside the block, or {NAME_IT}"
    )
