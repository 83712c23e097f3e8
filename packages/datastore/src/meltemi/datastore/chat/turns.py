"""The assistant's turns in a conversation rendered by a template without `{% generation %}` blocks (most
published chat models' own templates): found from renders of the conversation's beginnings.

An assistant message's turn starts where the conversation before it ends, rendered with the generation
prompt (the text a model is given to answer it): that render must be how the whole conversation begins, or
the turn's tokens cannot be told apart and the template is refused, naming the message. The turn ends with
the last end-of-turn token in the text the message adds to the conversation (the conversation through it,
rendered), so a newline a template writes after that token stays untrained, as the peers' training
templates keep it out of their generation blocks. A template that renders a turn otherwise when later
messages follow (Qwen3's drops the reasoning of turns before the last question) ends the turn at the first
end-of-turn token after its start instead, in the text as the whole conversation renders it; a turn found so
that would hold a later user's, system's or tool's text is refused, naming the message and the fix.

The end-of-turn token is the one the template writes after every assistant message (`written_end_of_turn`):
not the tokenizer's eos when a template writes that only at the end of the whole text (Phi-3's).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from meltemi.datastore.chat.template import ChatTemplate, RenderedChat
from meltemi.datastore.errors import ChatTemplateError

FROM_BLOCKS = "the template's {% generation %} blocks"
FROM_BEGINNINGS = (
    "renders of the conversation up to each assistant message (with the generation prompt) and through it, "
    "to its end of turn (the template has no {% generation %} blocks)"
)
NAME_IT = "name the token its turns end with (end_of_turn; --data.chat.end_of_turn when training)"
_PROBE = ("Probe question one", "Probe answer one", "Probe question two", "Probe answer two")
_TOKEN = re.compile(r"\s*(<[^<>\s]+>|\[[^\[\]\s]+\])")  # <|im_end|>, <end_of_turn>, </s>, [/INST]


@functools.lru_cache(maxsize=64)
def written_end_of_turn(template: ChatTemplate) -> str | None:
    """The token `template` writes right after each assistant message (a `<...>` or `[...]`): the first
    one after an answer that more messages follow, when the last answer is followed by it too or by the
    eos (the eos itself when every answer is followed by it); None when there is none, or the template
    fails on a plain user-assistant exchange.

    >>> phi3 = ChatTemplate(
    ...     "{% for m in messages %}<|{{ m.role }}|>\\n{{ m.content }}<|end|>\\n{% endfor %}"
    ...     "{% if add_generation_prompt %}<|assistant|>\\n{% else %}{{ eos_token }}{% endif %}",
    ...     "phi3.jinja",
    ...     {"eos_token": "<|endoftext|>"},
    ... )
    >>> written_end_of_turn(phi3)
    '<|end|>'
    """
    roles = ("user", "assistant", "user", "assistant")
    try:
        text = template.render([{"role": r, "content": c} for r, c in zip(roles, _PROBE, strict=True)]).text
    except ChatTemplateError:
        return None
    first, second, last = text.find(_PROBE[1]), text.find(_PROBE[2]), text.rfind(_PROBE[3])
    if min(first, second, last) < 0 or not first < second < last:
        return None
    followed = text[first + len(_PROBE[1]) : second]  # the first answer, then the next question's start
    ending = text[last + len(_PROBE[3]) :]  # the last answer, then what ends the whole text
    eos = template.special_tokens.get("eos_token")
    if eos and eos in os.path.commonprefix([followed, ending]):
        return eos  # written after every answer, after another token maybe (Command R's <|END_RESPONSE|>)
    after_one, after_last = _TOKEN.match(followed), _TOKEN.match(ending)
    if after_one is None or after_last is None:
        return None
    # the same token after each answer, or the eos after the last one only (gpt-oss's <|end|>, <|return|>)
    return after_one.group(1) if after_last.group(1) in (after_one.group(1), eos) else None


def turns_by_beginnings(
    template: ChatTemplate,
    messages: Sequence[Mapping[str, Any]],
    end_of_turn: str,
    first: int = 0,
    **variables: Any,
) -> RenderedChat:
    """`messages` rendered (with `variables`, such as `tools`), with one span per assistant message from
    index `first` on: from the end of the conversation before it (rendered with the generation prompt) to
    the last `end_of_turn` its own render adds, that token included (to the first after its start when the
    template renders the turn otherwise once later messages follow).

    >>> template = ChatTemplate(
    ...     "{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}"
    ...     "{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}",
    ...     "chatml.jinja",
    ...     {},
    ... )
    >>> chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]
    >>> rendered = turns_by_beginnings(template, chat, "<|im_end|>")
    >>> [rendered.text[a:b] for a, b in rendered.generation_spans]
    ['Hey<|im_end|>']
    """
    whole = template.render(messages, **variables)
    spans = []
    for index in range(first, len(messages)):
        if messages[index].get("role") != "assistant":
            continue
        number = index + 1
        before = template.render(messages[:index], add_generation_prompt=True, **variables).text
        if not whole.text.startswith(before):
            raise ChatTemplateError(
                f"chat template {template.source}: the conversation before message {number}, with the "
                "generation prompt, renders otherwise when that message follows, so its tokens cannot be "
                "told apart without {% generation %} blocks; use a template with them"
            )
        through = template.render(messages[: index + 1], **variables).text
        within = whole.text.startswith(through)  # then the turn ends before any later message's text
        if within:
            end = through.rfind(end_of_turn, len(before))
        else:  # the turn renders otherwise when later messages follow: it ends where the whole says
            end = whole.text.find(end_of_turn, len(before))
        if end < 0:
            raise ChatTemplateError(
                f"chat template {template.source}: message {number} (the assistant's) renders without "
                f"{end_of_turn} after the generation prompt, so a model trained on it would never learn "
                f"to stop; {NAME_IT}"
            )
        later = None if within else _later_text_within(whole.text, len(before), end, messages, index)
        if later is not None:
            raise ChatTemplateError(
                f"chat template {template.source}: message {number}'s turn (the assistant's) reaches "
                f"{end_of_turn} only after message {later}'s text, so a model would be trained on that "
                f"{messages[later - 1].get('role')}'s tokens; {NAME_IT}"
            )
        spans.append((len(before), end + len(end_of_turn)))
    return RenderedChat(whole.text, tuple(spans))


def _later_text_within(text: str, start: int, end: int, messages: Sequence[Mapping[str, Any]], index: int):
    """The number of the first message after `index` (up to the next assistant's) whose text is in
    `text[start:end]` after the assistant's own, or None."""
    own = messages[index].get("content")
    if isinstance(own, str) and own.strip() and (at := text.find(own.strip(), start, end)) >= 0:
        start = at + len(own.strip())
    for later in range(index + 1, len(messages)):
        if messages[later].get("role") == "assistant":
            return None
        content = messages[later].get("content")
        if isinstance(content, str) and content.strip() and text.find(content.strip(), start, end) >= 0:
            return later + 1
    return None
