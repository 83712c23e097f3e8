"""A template without generation blocks: each assistant turn found from renders of the conversation's
beginnings, the same spans the shipped template's blocks give, and a template whose turns cannot be found
so refused naming the message."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meltemi.datastore.chat.template import END_OF_TURN, ChatTemplate
from meltemi.datastore.chat.turns import turns_by_beginnings
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


QWEN3_LIKE = ChatTemplate(  # reasoning shown only in the turns after the last question, as Qwen3's shows it
    "{%- set ns = namespace(last=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- set ns.last = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and loop.index0 > ns.last %}<think>{{ m.thinking | default('') }}</think>"
    "{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% if no_thinking %}<think></think>{% endif %}"
    "{%- endif %}",
    "qwen3-like.jinja",
    {"eos_token": "<|im_end|>"},
)


def test_a_turn_that_renders_otherwise_when_later_messages_follow_ends_where_the_whole_conversation_says():
    chat = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hey", "thinking": "greet back"},  # its reasoning is dropped
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "content": "4", "thinking": "add"},
    ]
    rendered = turns_by_beginnings(QWEN3_LIKE, chat, "<|im_end|>")
    assert said(rendered) == ["Hey<|im_end|>", "<think>add</think>4<|im_end|>"]
    assert "greet back" not in rendered.text


def test_a_generation_prompt_that_is_not_how_the_conversation_goes_on_is_refused_naming_the_message():
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]
    chat += [{"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye"}]
    with pytest.raises(
        ChatTemplateError,
        match=r"^chat template qwen3-like.jinja: the conversation before message 2, with the generation "
        r"prompt, renders otherwise when that message follows, so its tokens cannot be told apart",
    ):
        turns_by_beginnings(QWEN3_LIKE, chat, "<|im_end|>", no_thinking=True)


def test_a_turn_without_the_end_of_turn_token_is_refused_saying_what_to_name():
    with pytest.raises(
        ChatTemplateError,
        match=r"^chat template chatml.jinja: message 2 \(the assistant's\) renders without <\|eot_id\|> "
        r"after the generation prompt, .* name the token its turns end with \(end_of_turn; "
        r"--data.chat.end_of_turn when training\)$",
    ):
        chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]
        turns_by_beginnings(CHATML, chat, END_OF_TURN)
