"""A template without generation blocks: each assistant turn found from renders of the conversation's
beginnings, the same spans the shipped template's blocks give, and a template whose turns cannot be found
so refused naming the message."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meltemi.datastore.assistant_turns import turns_by_beginnings
from meltemi.datastore.chat_template import END_OF_TURN, ChatTemplate
from meltemi.datastore.errors import ChatTemplateError

SHIPPED = ChatTemplate.llama3()
WITHOUT_BLOCKS = ChatTemplate(  # the same text; each block a plain `if`, so whitespace control is unchanged
    SHIPPED.text.replace("{% generation %}", "{% if true %}").replace("{% endgeneration %}", "{% endif %}"),
    "llama3-without-blocks.jinja",
    SHIPPED.special_tokens,
)
CHATML = ChatTemplate(  # Qwen's layout: a newline after each end of turn, outside what a model says
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "chatml.jinja",
    {"eos_token": "<|im_end|>"},
)

turns = st.lists(
    st.tuples(st.sampled_from(["system", "user", "assistant", "tool"]), st.text(max_size=20)), max_size=6
)


def said(rendered):
    return [rendered.text[a:b] for a, b in rendered.generation_spans]


@given(turns)
def test_the_turns_found_without_blocks_are_the_shipped_templates_generation_spans(turns):
    messages = [{"role": role, "content": content} for role, content in turns]
    assert WITHOUT_BLOCKS.has_generation_blocks is False
    assert turns_by_beginnings(WITHOUT_BLOCKS, messages, END_OF_TURN) == SHIPPED.render(messages)


def test_a_turn_ends_at_its_end_of_turn_and_only_assistant_messages_from_the_first_asked_are_found():
    chat = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hey"},
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "content": "4"},
    ]
    rendered = turns_by_beginnings(CHATML, chat, "<|im_end|>")
    assert said(rendered) == ["Hey<|im_end|>", "4<|im_end|>"]
    assert rendered.text.endswith("4<|im_end|>\n")
    assert said(turns_by_beginnings(CHATML, chat, "<|im_end|>", first=2)) == ["4<|im_end|>"]
    assert turns_by_beginnings(CHATML, chat[:1], "<|im_end|>").generation_spans == ()


def test_a_turn_that_renders_otherwise_when_later_messages_follow_is_refused_naming_the_message():
    forgets = ChatTemplate(  # an earlier turn's reasoning is left out, as Qwen3's template leaves it
        "{% for m in messages %}{{ m.role }}: {% if m.thinking and loop.last %}({{ m.thinking }}) "
        "{% endif %}{{ m.content }}<|eot_id|>{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}",
        "forgets.jinja",
        {},
    )
    chat = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hey", "thinking": "greet back"},
        {"role": "user", "content": "Bye"},
    ]
    assert said(turns_by_beginnings(forgets, chat[:2], END_OF_TURN)) == ["(greet back) Hey<|eot_id|>"]
    with pytest.raises(
        ChatTemplateError,
        match=r"^chat template forgets.jinja: the conversation through it renders otherwise when later "
        r"messages follow, so message 2's tokens cannot be told apart without \{% generation %\} blocks",
    ):
        turns_by_beginnings(forgets, chat, END_OF_TURN)


def test_a_turn_without_the_end_of_turn_token_is_refused_saying_what_to_name():
    with pytest.raises(
        ChatTemplateError,
        match=r"^chat template chatml.jinja: message 2 \(the assistant's\) renders without <\|eot_id\|> "
        r"after the generation prompt, .* name the token its turns end with \(end_of_turn\)$",
    ):
        chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]
        turns_by_beginnings(CHATML, chat, END_OF_TURN)
