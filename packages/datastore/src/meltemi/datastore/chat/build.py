"""Conversations to tokens and loss weights: rendered once by the chat template, tokenized once, the
assistant's tokens found from the template's generation blocks, as transformers finds them, or, for a
template without them, from renders of each conversation's beginnings (`turns`).

A chat store's build reads conversations (`conversations.read_conversations`), renders each with the
template (`template.ChatTemplate`), tokenizes the rendered text as one string (special tokens as
written, none added), and weighs each token 1 where transformers' `return_assistant_tokens_mask` marks
it (`loss_on="assistant"`) or everywhere (`loss_on="all"`); in a prompt and its completion, the assistant's
tokens of the completion only. Every assistant turn must end with the end-of-turn token inside its
generation block, so that a model learns to stop; a template whose blocks leave it out is refused, naming
the first conversation it renders so. A conversation longer than `max_tokens` is cut to it
(`overlong="truncate"`) or left out (`"drop"`), counted either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from meltemi.datastore.build.inputs.sources import ReadNotes, ReadPolicy
from meltemi.datastore.chat.conversations import Conversation, tool_call_names
from meltemi.datastore.chat.recipe import ChatBuild
from meltemi.datastore.chat.template import (
    ChatTemplate,
    RenderedChat,
    assistant_mask,
)
from meltemi.datastore.chat.turns import turns_by_beginnings
from meltemi.datastore.errors import BadLineError, ChatTemplateError


@dataclass
class EncodedChats:
    """Conversations as one token stream: `tokens` and `weights` joined, and each one's `lengths`."""

    tokens: np.ndarray
    weights: np.ndarray
    lengths: np.ndarray


def encode_conversations(
    tokenizer: Tokenizer,
    conversations: Sequence[Conversation],
    chat: ChatBuild,
    dtype: np.dtype,
    policy: ReadPolicy,
    notes: ReadNotes,
) -> EncodedChats:
    """Render, tokenize and weigh `conversations` (one `encode_batch` call); refusals, cuts and drops are
    counted in `notes` (a conversation without an assistant token is a `BadLineError` naming it, unless the
    policy skips bad lines)."""
    end_of_turn = int(tokenizer.token_to_id(chat.turn_end))
    rendered = []
    for conversation in conversations:
        try:
            rendered.append(_rendered(chat, conversation))
        except ChatTemplateError as e:
            raise ChatTemplateError(f"{conversation.place}: {e}") from None
    encodings = tokenizer.encode_batch([r.text for r in rendered], add_special_tokens=False)
    tokens, weights, lengths = [], [], []
    for conversation, chat_text, encoding in zip(conversations, rendered, encodings, strict=True):
        ids = np.asarray(encoding.ids, dtype)
        if chat.loss_on == "all":
            mask = np.ones(len(ids), np.uint8)
        else:
            mask = assistant_mask(encoding, chat_text.generation_spans)
            _check_turn_ends(ids, mask, end_of_turn, chat, conversation)
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


def _rendered(chat: ChatBuild, conversation: Conversation) -> RenderedChat:
    """A conversation rendered, with the spans of its assistant's turns (its completion's only when it has a
    prompt: the prompt's messages render to the start of the text, as they do alone, and no span before its
    end is kept)."""
    template, messages = chat.template, conversation.messages
    tools = {} if conversation.tools is None else {"tools": list(conversation.tools)}
    if tools and not template.reads_tools:
        raise ChatTemplateError(
            f"chat template {template.source}: it never reads the conversation's tools, so a model would "
            "learn to call tools it was never shown; use a template that renders them, such as the model's "
            "own (a tokenizer directory)"
        )
    if chat.loss_on == "all" or template.has_generation_blocks:
        whole = template.render(messages, **tools)
    else:
        whole = turns_by_beginnings(template, messages, chat.turn_end, conversation.prompt_messages, **tools)
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
    ids: np.ndarray, mask: np.ndarray, end_of_turn: int, chat: ChatBuild, conversation: Conversation
) -> None:
    """Every run of the assistant's tokens must end with the end-of-turn token, or the model would never
    learn to stop: a template whose generation blocks leave it out is refused."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    last = np.flatnonzero(edges == -1) - 1
    if (ids[last] != end_of_turn).any():
        raise ChatTemplateError(
            f"chat template {chat.template.source}: an assistant turn's {{% generation %}} block "
            "does not end "
            f"with {chat.turn_end} (first at {conversation.place}), so a model trained on it would never "
            f"learn to stop; put {chat.turn_end} inside the block"
        )
