"""Chat templates render as transformers renders them (its sandbox, variables and generation blocks), fail
with one line naming the template and the line, and give the assistant mask transformers computes.

The exact comparison with transformers is in tests/test_chat_template_parity.py; these tests need only the
datastore's own dependencies.
"""

import json
import pickle
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from meltemi.datastore.chat.build import encode_conversation
from meltemi.datastore.chat.recipe import ChatRecipe
from meltemi.datastore.chat.template import (
    BEGIN_OF_TEXT,
    CHAT_SPECIAL_TOKENS,
    END_OF_TURN,
    ChatTemplate,
    assistant_mask,
)
from meltemi.datastore.errors import ChatTemplateError

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "  Hi!\n"},
    {"role": "assistant", "content": "\nHello.  "},
    {"role": "user", "content": "Bye"},
    {"role": "assistant", "content": "Bye."},
]


def _words(*words: str) -> Tokenizer:
    """A tokenizer of whole words split at whitespace: token i is `words[i]`, so offsets are easy to read."""
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def test_the_shipped_template_writes_the_llama3_layout_with_the_assistant_in_generation_blocks():
    rendered = ChatTemplate.llama3().render(CHAT)
    header = "<|start_header_id|>{}<|end_header_id|>\n"
    expected = (
        BEGIN_OF_TEXT
        + header.format("system") + "Be brief." + END_OF_TURN
        + header.format("user") + "Hi!" + END_OF_TURN
        + header.format("assistant") + "Hello." + END_OF_TURN
        + header.format("user") + "Bye" + END_OF_TURN
        + header.format("assistant") + "Bye." + END_OF_TURN
    )  # fmt: skip
    assert rendered.text == expected
    assert [rendered.text[a:b] for a, b in rendered.generation_spans] == [
        "Hello.<|eot_id|>",
        "Bye.<|eot_id|>",
    ]
    assert rendered.generation_spans[-1][1] == len(rendered.text)


def test_the_generation_prompt_adds_the_assistant_header_and_no_span():
    template = ChatTemplate.llama3()
    plain = template.render(CHAT[:2])
    prompted = template.render(CHAT[:2], add_generation_prompt=True)
    assert prompted.text == plain.text + "<|start_header_id|>assistant<|end_header_id|>\n"
    assert plain.generation_spans == prompted.generation_spans == ()


def test_the_shipped_template_uses_its_special_tokens_and_variables_override_them():
    template = ChatTemplate.llama3({"bos_token": "<s>", "eos_token": "</s>"})
    assert template.render(CHAT[:1]).text.startswith("<s><|start_header_id|>")
    assert template.render(CHAT[:1], bos_token="[B]").text.startswith("[B]<|start_header_id|>")
    assert ChatTemplate.llama3().special_tokens == {"bos_token": BEGIN_OF_TEXT, "eos_token": END_OF_TURN}
    assert CHAT_SPECIAL_TOKENS[0] == BEGIN_OF_TEXT and CHAT_SPECIAL_TOKENS[-1] == END_OF_TURN


def test_messages_reach_the_template_as_transformers_passes_them():
    """None values left out, keys in their order, non-ASCII kept by `tojson`, reasoning under its names."""
    template = ChatTemplate("{% for m in messages %}{{ m | tojson }}\n{% endfor %}", "t.jinja", {})
    messages = [
        {"content": "héllo 😀", "role": "user", "name": None},
        {"role": "assistant", "content": "ok", "reasoning": "because"},
    ]
    lines = template.render(messages).text.splitlines()
    assert lines[0] == '{"content": "héllo 😀", "role": "user"}'
    assert list(json.loads(lines[1])) == ["thinking", "role", "content", "reasoning", "reasoning_content"]
    assert messages[0]["name"] is None  # the caller's messages are untouched


def test_tojson_takes_the_options_transformers_gives_it():
    template = ChatTemplate("{{ {'b': 1, 'a': [1, 2]} | tojson(indent=1, sort_keys=true) }}", "t.jinja", {})
    assert template.render([]).text == '{\n "a": [\n  1,\n  2\n ],\n "b": 1\n}'


def test_the_sandbox_is_configured_as_transformers_configures_it():
    def render(text: str, **variables) -> str:
        return ChatTemplate(text, "t.jinja", {}).render([], **variables).text

    assert render("  {% if true %}\nx\n{% endif %}\n") == "x\n"  # trim_blocks and lstrip_blocks
    assert render("{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}") == "01"
    assert render("{% set ns = namespace(n=1) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}") == "2"
    assert render("{{ dict(a=1) }}{{ dict.fromkeys(['b'], 2) }}") == "{'a': 1}{'b': 2}"
    assert len(render("{{ strftime_now('%Y-%m-%d') }}")) == 10
    assert render("{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}") == "TrueTrueFalse"
    for escape in ("{{ ''.__class__.__base__ }}", "{% set ns = namespace(_x=1) %}", "{{ [].append(1) }}"):
        with pytest.raises(ChatTemplateError, match=r"^chat template t\.jinja, line 1: "):
            render(escape)


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("a\n{% for m in %}", 2, "Expected an expression"),
        ("a\n\n{{ raise_exception('roles must alternate') }}", 3, "roles must alternate"),
        ("{% for m in messages %}\n{{ m.x.y }}\n{% endfor %}", 2, "'dict object' has no attribute 'x'"),
        ("{{ 'a' }}\n{{ 1 + 'b' }}", 2, "TypeError: unsupported operand"),
        ("{% generation %}x", 1, "Unexpected end of template"),
    ],
)
def test_a_template_that_fails_is_one_line_naming_its_source_and_line(text, line, reason):
    with pytest.raises(ChatTemplateError) as caught:
        ChatTemplate(text, "/templates/t.jinja", {}).render([{"role": "user", "content": "Hi"}])
    message = str(caught.value)
    assert message.startswith(f"chat template /templates/t.jinja, line {line}: ")
    assert reason in message and "\n" not in message


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("{% generation %}x{% endgeneration %}", True),
        ("{%- generation -%}x{%- endgeneration %}", True),
        ("{%generation%}x{%endgeneration%}", True),
        ("{%+ generation %}x{% endgeneration %}", True),
        ("{{ 'generation' }}", False),
    ],
)
def test_generation_blocks_are_found_with_or_without_whitespace_control(text, found):
    assert ChatTemplate(text, "t.jinja", {}).has_generation_blocks is found


def test_whitespace_control_around_a_generation_block_moves_its_span_with_the_text():
    template = ChatTemplate(
        "H:\n  {%- generation -%}\n  {{ messages[0].content }}\n{% endgeneration %}", "t", {}
    )
    rendered = template.render([{"role": "assistant", "content": "x"}])
    assert rendered.text == "H:x\n" and rendered.generation_spans == ((2, 4),)


def test_a_generation_block_in_a_loop_records_one_span_per_pass_and_nested_output_counts():
    text = "{% for m in messages %}[{% generation %}<{{ m.content }}>{% endgeneration %}]{% endfor %}"
    rendered = ChatTemplate(text, "t", {}).render([{"content": "a"}, {"content": "bc"}])
    assert rendered.text == "[<a>][<bc>]"
    assert [rendered.text[a:b] for a, b in rendered.generation_spans] == ["<a>", "<bc>"]


def test_a_template_from_a_file_and_its_errors(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text("{{ bos_token }}{{ messages[0].content }}\n")
    template = ChatTemplate.from_file(path)
    assert template.source == str(path) and template.render([{"content": "x"}]).text == BEGIN_OF_TEXT + "x"
    assert ChatTemplate.from_file(path, {"bos_token": "<s>"}).render([{"content": "x"}]).text == "<s>x"
    with pytest.raises(ChatTemplateError, match=r"absent\.jinja: no such file"):
        ChatTemplate.from_file(tmp_path / "absent.jinja")
    (tmp_path / "binary.jinja").write_bytes(b"\xff\xfe")
    with pytest.raises(ChatTemplateError, match=r"binary\.jinja: not UTF-8 text \(byte 0\)"):
        ChatTemplate.from_file(tmp_path / "binary.jinja")


def _config(directory, **config):
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def test_a_template_from_a_tokenizer_config_with_its_special_tokens(tmp_path):
    directory = _config(
        tmp_path,
        chat_template="{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ image_token }}|"
        "{{ unk_token is defined }}",
        bos_token={"content": "<s>", "lstrip": False, "__type": "AddedToken"},
        eos_token="</s>",
        pad_token="<pad>",
        image_token="<img>",
        unk_token=None,
        add_bos_token=True,
    )
    for path in (directory, directory / "tokenizer_config.json"):
        template = ChatTemplate.from_tokenizer_config(path)
        assert template.source == str(directory / "tokenizer_config.json")
        assert template.render([]).text == "<s>|</s>|<pad>|<img>|False"


def test_a_legacy_special_tokens_map_overrides_a_config_without_added_tokens(tmp_path):
    _config(tmp_path, chat_template="{{ bos_token }}{{ eos_token }}", bos_token="<a>", eos_token="<b>")
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"bos_token": {"content": "<s>"}}))
    assert ChatTemplate.from_tokenizer_config(tmp_path).render([]).text == "<s><b>"
    _config(tmp_path, chat_template="{{ bos_token }}", bos_token="<a>", added_tokens_decoder={})
    assert ChatTemplate.from_tokenizer_config(tmp_path).render([]).text == "<a>"


def test_a_named_default_template_and_a_chat_template_jinja_beside_the_config(tmp_path):
    named = [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain"}]
    _config(tmp_path, chat_template=named, eos_token="</s>")
    assert ChatTemplate.from_tokenizer_config(tmp_path).render([]).text == "plain"
    (tmp_path / "chat_template.jinja").write_text("{{ eos_token }} from the file")
    template = ChatTemplate.from_tokenizer_config(tmp_path)
    assert template.render([]).text == "</s> from the file"
    assert template.source == str(tmp_path / "chat_template.jinja")


def test_a_tokenizer_config_without_a_usable_template_is_one_line_naming_it(tmp_path):
    with pytest.raises(ChatTemplateError, match=r"tokenizer_config\.json: no such file"):
        ChatTemplate.from_tokenizer_config(tmp_path)
    _config(tmp_path, eos_token="</s>")
    with pytest.raises(
        ChatTemplateError, match=r"tokenizer_config\.json: no chat_template \(and no chat_tem"
    ):
        ChatTemplate.from_tokenizer_config(tmp_path)
    _config(tmp_path, chat_template=[{"name": "tool_use", "template": "x"}])
    with pytest.raises(ChatTemplateError, match=r"one named 'default' \(names: tool_use\)"):
        ChatTemplate.from_tokenizer_config(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{")
    with pytest.raises(ChatTemplateError, match=r"tokenizer_config\.json: not valid JSON"):
        ChatTemplate.from_tokenizer_config(tmp_path)
    _config(tmp_path, chat_template="{% if %}")
    with pytest.raises(ChatTemplateError, match=r"tokenizer_config\.json, line 1: Expected an expression"):
        ChatTemplate.from_tokenizer_config(tmp_path)


def test_a_template_anywhere_the_seam_reads_is_the_template_of_the_local_files(any_location, tmp_path):
    """A tokenizer directory (its config, legacy map and chat_template.jinja) or a Jinja file in a bucket
    gives the template the same files give on disk; a location with none of them is one line naming it."""
    from meltemi.datastore.chat.recipe import load_template
    from meltemi.datastore.storage import Directory

    files = {
        "tokenizer_config.json": json.dumps(
            {"chat_template": "config", "bos_token": "<a>", "eos_token": "<e>"}
        ),
        "special_tokens_map.json": json.dumps({"bos_token": {"content": "<s>"}}),
        "chat_template.jinja": "{{ bos_token }}{{ eos_token }}{{ messages[0].content }}",
    }
    there = Directory(any_location)
    for name, text in files.items():
        there.write_text(f"hf/{name}", text)
        (tmp_path / name).write_text(text)
    there.write_text("t.jinja", files["chat_template.jinja"])
    hi = [{"role": "user", "content": "hi"}]
    local = load_template(str(tmp_path)).render(hi).text
    assert local == "<s><e>hi"
    for spec in (there.where("hf"), there.where("hf/tokenizer_config.json")):
        template = load_template(spec)
        assert template.render(hi).text == local and template.source == there.where("hf/chat_template.jinja")
    assert load_template(there.where("t.jinja")).render(hi).text == BEGIN_OF_TEXT + END_OF_TURN + "hi"
    missing = there.where("nothing")
    with pytest.raises(ChatTemplateError, match=f"^chat template {re.escape(repr(missing))}: no such file"):
        load_template(missing)


def test_a_template_is_a_value_that_pickles_and_is_named_by_its_hash():
    template = ChatTemplate.llama3()
    assert pickle.loads(pickle.dumps(template)) == template
    assert template.sha256 == ChatTemplate(template.text, "elsewhere", {}).sha256
    assert template.sha256 != ChatTemplate(template.text + " ", "x", {}).sha256
    assert template.source == "the shipped llama3 template" and template.has_generation_blocks


def test_the_mask_follows_transformers_including_its_quirks():
    tokenizer = _words("a", "b", "c", "d")
    encoding = tokenizer.encode("a b  c d", add_special_tokens=False)  # offsets (0,1) (2,3) (5,6) (7,8)
    assert assistant_mask(encoding, [(2, 3), (7, 8)]).tolist() == [0, 1, 0, 1]
    assert assistant_mask(encoding, [(2, 6)]).tolist() == [0, 1, 1, 0]
    # The span's last character is a space no token holds: marked to the end.
    assert assistant_mask(encoding, [(2, 5)]).tolist() == [0, 1, 1, 1]
    # Its last character is in token 0 (falsy): marked to the end.
    assert assistant_mask(encoding, [(0, 1)]).tolist() == [1, 1, 1, 1]
    # Its first character is in no token: this span and every later one are left out.
    assert assistant_mask(encoding, [(0, 1), (4, 6), (7, 8)]).tolist() == [1, 1, 1, 1]
    assert assistant_mask(encoding, [(2, 3), (4, 6), (7, 8)]).tolist() == [0, 1, 0, 0]
    assert assistant_mask(encoding, []).dtype == np.uint8


def test_encoding_adds_no_special_tokens_and_ignores_truncation_and_padding():
    tokenizer = _words("<s>", "a", "b")
    tokenizer.add_special_tokens(["<s>"])
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tokenizer.enable_truncation(2)
    tokenizer.enable_padding(length=8)
    template = ChatTemplate("<s>{% for m in messages %}{{ m.content }} {% endfor %}", "t.jinja", {})
    recipe = ChatRecipe(template, loss_on="all")
    encoded = encode_conversation(tokenizer, recipe, [{"role": "user", "content": "a b a"}])
    assert encoded.text == "<s>a b a " and encoded.ids == [0, 1, 2, 1]
    assert encoded.weights.tolist() == [1, 1, 1, 1]
    assert (
        tokenizer.truncation is not None and tokenizer.padding is not None
    )  # the caller's tokenizer is kept


assistant_turns = st.lists(
    st.tuples(st.sampled_from(["user", "assistant"]), st.text(max_size=30)), min_size=1, max_size=5
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=assistant_turns)
def test_the_mask_is_exactly_the_tokens_of_the_assistants_words_and_ends_of_turn(tokenizer_path, turns):
    """Any contents, any order of turns: the marked tokens are those whose characters overlap a generation
    span, and they decode to each assistant's trimmed content followed by its end of turn."""
    tokenizer = Tokenizer.from_file(tokenizer_path)
    rendered = ChatTemplate.llama3().render([{"role": role, "content": content} for role, content in turns])
    encoding = tokenizer.encode(rendered.text, add_special_tokens=False)
    mask = assistant_mask(encoding, rendered.generation_spans)
    overlapping = [
        any(a < stop and start < b for start, stop in rendered.generation_spans) for a, b in encoding.offsets
    ]
    assert mask.astype(bool).tolist() == overlapping
    marked = [token for token, m in zip(encoding.ids, mask, strict=True) if m]
    said = "".join(content.strip() + END_OF_TURN for role, content in turns if role == "assistant")
    assert tokenizer.decode(marked, skip_special_tokens=False) == said
    messages = [{"role": role, "content": content} for role, content in turns]
    encoded = encode_conversation(tokenizer, ChatRecipe(ChatTemplate.llama3()), messages)
    assert encoded.ids == encoding.ids and (encoded.weights == mask).all()  # the encode path's mask
