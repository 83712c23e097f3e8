"""The assistant's turns in a conversation rendered by a template without `{% generation %}` blocks (most
published chat models' own templates): found from renders of the conversation's beginnings.

An assistant message's turn starts where the conversation before it ends, rendered with the generation
prompt (the text a model is given to answer it): that render must be how the whole conversation begins, or
the turn's tokens cannot be told apart and the template is refused, naming the message. The turn ends with
the last end-of-turn token in the text the message adds to the conversation (the conversation through it,
rendered), so a newline a template writes after that token stays untrained, as the peers' training
templates keep it out of their generation blocks. A template that renders a turn otherwise when later
messages follow (Qwen3's drops the reasoning of turns before the last question) ends the turn at the first
end-of-turn token after its start instead, in the text as the whole conversation renders it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from meltemi.datastore.chat.template import ChatTemplate, RenderedChat
from meltemi.datastore.errors import ChatTemplateError

FROM_BLOCKS = "the template's {% generation %} blocks"
FROM_BEGINNINGS = (
    "renders of the conversation up to each assistant message (with the generation prompt) and through it, "
    "to its end of turn (the template has no {% generation %} blocks)"
)


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
        if whole.text.startswith(through):
            end = through.rfind(end_of_turn, len(before))
        else:  # the turn renders otherwise when later messages follow: it ends where the whole says
            end = whole.text.find(end_of_turn, len(before))
        if end < 0:
            raise ChatTemplateError(
                f"chat template {template.source}: message {number} (the assistant's) renders without "
                f"{end_of_turn} after the generation prompt, so a model trained on it would never learn "
                "to stop; name the token its turns end with (end_of_turn)"
            )
        spans.append((len(before), end + len(end_of_turn)))
    return RenderedChat(whole.text, tuple(spans))
