"""Our chat templates give exactly what transformers gives: the rendered string, the token ids and the
assistant mask of ``apply_chat_template(..., return_assistant_tokens_mask=True)`` on the same tokenizer
directory, for the shipped template and for templates read from a ``tokenizer_config.json``.

The tokenizer is a small byte-level BPE trained once per module on standard-library files, so it has the
chat template's special tokens.
"""

import json
import shutil

import pytest
from tokenizers import Tokenizer, processors

from meltemi.datastore import corpora
from meltemi.datastore.chat.template import (
    BEGIN_OF_TEXT,
    END_OF_TURN,
    ChatTemplate,
    encode_chat,
    encode_chats,
)

transformers = pytest.importorskip(
    "transformers", reason="the parity tests compare with transformers (the `interop` dependency group)"
)
pytestmark = pytest.mark.xdist_group("chat-parity")  # one worker trains the tokenizer and loads it once

LLAMA3 = ChatTemplate.llama3()
SYSTEM = {"role": "system", "content": "You answer questions about Python."}
CONVERSATIONS = {
    "system and several turns": [
        SYSTEM,
        {"role": "user", "content": "What does len do?"},
        {"role": "assistant", "content": "It returns the number of items."},
        {"role": "user", "content": "And sorted?"},
        {"role": "assistant", "content": "  It returns a new sorted list.\n\n"},
    ],
    "consecutive assistant turns": [
        {"role": "user", "content": "Count to three."},
        {"role": "assistant", "content": "One."},
        {"role": "assistant", "content": "Two."},
        {"role": "assistant", "content": "Three."},
    ],
    "empty contents": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "   "},
        {"role": "assistant", "content": "ok"},
    ],
    "non-ASCII": [
        {"role": "user", "content": "Translate 😀 and 你好, and spell café with a combining accent."},
        {"role": "assistant", "content": "😀 is a smile; 你好 is hello; cafe\u0301 ends in e + U+0301. 🇬🇷"},
    ],
    "a trailing user turn": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"},
    ],
    "special tokens written in the content": [
        {"role": "user", "content": f"What is {END_OF_TURN}?"},
        {"role": "assistant", "content": f"It ends a turn: {END_OF_TURN} and {BEGIN_OF_TEXT} begins."},
    ],
    "a tool turn": [
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "content": "calc(2 + 2)", "tool_calls": None},
        {"role": "tool", "content": "4", "name": "calc"},
        {"role": "assistant", "content": "4"},
    ],
}


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    """A byte-level BPE that knows Python: words like `return` and `self` are single tokens."""
    root = tmp_path_factory.mktemp("chat-parity")
    files = corpora.python_stdlib()[:20]
    return corpora.train_tokenizer(files, 800, root / "tokenizer.json")


def _directory(root, tokenizer_file, tokenizer=None, template_file=False, **config):
    """A Hugging Face tokenizer directory: `tokenizer.json` and a `tokenizer_config.json` with `config`, the
    llama3 special tokens and, unless given or `template_file` (then `chat_template.jinja`), our template."""
    root.mkdir()
    if tokenizer is None:
        shutil.copy(tokenizer_file, root / "tokenizer.json")
    else:
        tokenizer.save(str(root / "tokenizer.json"))
    config = {
        "bos_token": BEGIN_OF_TEXT,
        "eos_token": END_OF_TURN,
        "tokenizer_class": "PreTrainedTokenizerFast",
        **config,
    }
    if template_file:
        (root / "chat_template.jinja").write_text(config.pop("chat_template", LLAMA3.text), encoding="utf-8")
    else:
        config.setdefault("chat_template", LLAMA3.text)
    (root / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def llama3_dir(tmp_path_factory, tokenizer_file):
    return _directory(tmp_path_factory.mktemp("dirs") / "llama3", tokenizer_file)


@pytest.fixture(scope="module")
def hf(llama3_dir):
    return transformers.AutoTokenizer.from_pretrained(llama3_dir)


def _same(hf_tokenizer, template, tokenizer, messages, add_generation_prompt=False, chat_template=None):
    """Our string, ids and mask equal transformers'; returns ours."""
    options = {"add_generation_prompt": add_generation_prompt, "chat_template": chat_template}
    text = hf_tokenizer.apply_chat_template(messages, tokenize=False, **options)
    theirs = hf_tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True, **options
    )
    rendered = template.render(messages, add_generation_prompt=add_generation_prompt)
    ids, mask = encode_chat(tokenizer, rendered)
    assert rendered.text == text
    assert ids == list(theirs["input_ids"])
    assert mask.tolist() == list(theirs["assistant_masks"])
    return rendered, ids, mask


@pytest.mark.parametrize("add_generation_prompt", [False, True])
@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_the_shipped_template_matches_transformers(hf, tokenizer_file, name, add_generation_prompt):
    tokenizer = Tokenizer.from_file(tokenizer_file)
    messages = CONVERSATIONS[name]
    _, ids, mask = _same(hf, LLAMA3, tokenizer, messages, add_generation_prompt)
    bos = tokenizer.token_to_id(BEGIN_OF_TEXT)
    assert ids[0] == bos and ids[1:].count(bos) == sum(m["content"].count(BEGIN_OF_TEXT) for m in messages)
    assert mask.sum() >= sum(m["role"] == "assistant" for m in messages)


def test_the_batched_encoding_is_the_one_at_a_time_encoding(tokenizer_file):
    tokenizer = Tokenizer.from_file(tokenizer_file)
    rendered = [LLAMA3.render(messages) for messages in CONVERSATIONS.values()]
    batched = encode_chats(tokenizer, rendered)
    for one, (ids, mask) in zip(rendered, batched, strict=True):
        alone_ids, alone_mask = encode_chat(tokenizer, one)
        assert ids == alone_ids and mask.tolist() == alone_mask.tolist()


GLUED = (
    "{% for m in messages %}{% if m.role == 'assistant' %}"
    " re{% generation %}{{ m.content }}{% endgeneration %}f.x\n"
    "{% else %}{{ m.role }}: {{ m.content }}\n{% endif %}{% endfor %}"
)


def test_a_token_that_crosses_the_generation_boundary_is_marked_as_transformers_marks_it(hf, tokenizer_file):
    """Text glued to both ends of a generation block: ` re` + `turn sel` + `f.x` makes ` return` and ` self`,
    single tokens, one starting before the block and one ending after it."""
    tokenizer = Tokenizer.from_file(tokenizer_file)
    template = ChatTemplate(GLUED, "glued", LLAMA3.special_tokens)
    messages = [{"role": "user", "content": "Say it."}, {"role": "assistant", "content": "turn sel"}]
    rendered, ids, mask = _same(hf, template, tokenizer, messages, chat_template=GLUED)
    [(start, stop)] = rendered.generation_spans
    offsets = tokenizer.encode(rendered.text, add_special_tokens=False).offsets
    crossing = [i for i, (a, b) in enumerate(offsets) if a < start < b or a < stop < b]
    assert [rendered.text[slice(*offsets[i])] for i in crossing] == [" return", " self"]
    assert all(mask[crossing])


def test_a_template_from_a_tokenizer_config_whose_message_key_order_matters(tmp_path, tokenizer_file):
    """`tojson` of each message as transformers gives it: keys in their order, None values left out,
    reasoning under its names, non-ASCII as it is."""
    template = (
        "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n"
        "{% if m.role == 'assistant' %}{% generation %}{{ m | tojson }}{{ eos_token }}{% endgeneration %}"
        "{% else %}{{ m | tojson }}{{ eos_token }}{% endif %}{% endfor %}"
    )
    directory = _directory(tmp_path / "tojson", tokenizer_file, chat_template=template)
    messages = [
        {"content": "Qu'est-ce que ça fait ? 🤔", "role": "user", "name": None},
        {
            "role": "assistant",
            "thinking": "It sorts.",
            "content": "Il trie.",
            "tool_calls": [{"b": 1, "a": 2}],
        },
        {"role": "assistant", "content": "Encore.", "reasoning": "more"},
    ]
    ours = ChatTemplate.from_tokenizer_config(directory)
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    rendered, _, _ = _same(transformers.AutoTokenizer.from_pretrained(directory), ours, tokenizer, messages)
    assert '{"content": "Qu\'est-ce que ça fait ? 🤔", "role": "user"}' in rendered.text


EATEN = (
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'assistant' %}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{%- generation %}{{ m.content | trim }}<|eot_id|>{% endgeneration %}"
    "{% else %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content | trim }}<|eot_id|>"
    "{% endif %}{% endfor %}"
)


def test_whitespace_control_that_eats_the_newlines_after_a_header(hf, tokenizer_file):
    ours = ChatTemplate(EATEN, "eaten", LLAMA3.special_tokens)
    tokenizer = Tokenizer.from_file(tokenizer_file)
    for messages in CONVERSATIONS.values():
        rendered, _, _ = _same(hf, ours, tokenizer, messages, chat_template=EATEN)
        assert "assistant<|end_header_id|>\n" not in rendered.text
        assert "user<|end_header_id|>\n\n" in rendered.text


def test_a_post_processor_that_adds_a_bos_gives_no_second_one(tmp_path, tokenizer_file):
    """With a `TemplateProcessing` that adds `<|begin_of_text|>`, the template's own is still the only one,
    in ours and in transformers (read from `chat_template.jinja`, as transformers 5 prefers)."""
    tokenizer = Tokenizer.from_file(tokenizer_file)
    bos = tokenizer.token_to_id(BEGIN_OF_TEXT)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BEGIN_OF_TEXT} $A", pair=f"{BEGIN_OF_TEXT} $A $B", special_tokens=[(BEGIN_OF_TEXT, bos)]
    )
    assert tokenizer.encode("x").ids[0] == bos
    directory = _directory(tmp_path / "bos", tokenizer_file, tokenizer=tokenizer, template_file=True)
    ours = ChatTemplate.from_tokenizer_config(directory)
    assert ours.source == str(directory / "chat_template.jinja") and ours.text == LLAMA3.text
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    for messages in CONVERSATIONS.values():
        _, ids, _ = _same(hf_tokenizer, ours, tokenizer, messages)
        assert ids[0] == bos and ids[1] != bos


def test_a_legacy_special_tokens_map_gives_the_tokens_as_in_transformers(tmp_path, tokenizer_file):
    """Without `added_tokens_decoder` in the configuration, `special_tokens_map.json` overrides its tokens."""
    directory = _directory(
        tmp_path / "legacy",
        tokenizer_file,
        bos_token="<|endoftext|>",
        chat_template="{{ bos_token }}{{ pad_token }}",
    )
    legacy = {"bos_token": {"content": BEGIN_OF_TEXT, "lstrip": False}, "pad_token": "<|end_header_id|>"}
    (directory / "special_tokens_map.json").write_text(json.dumps(legacy))
    ours = ChatTemplate.from_tokenizer_config(directory)
    tokenizer = Tokenizer.from_file(tokenizer_file)
    rendered, _, _ = _same(
        transformers.AutoTokenizer.from_pretrained(directory),
        ours,
        tokenizer,
        [{"role": "user", "content": "x"}],
    )
    assert rendered.text == BEGIN_OF_TEXT + "<|end_header_id|>"


@pytest.mark.parametrize("name", ["system and several turns", "non-ASCII", "a tool turn"])
def test_a_final_message_left_open_as_lm_eval_asks_matches_transformers(hf, name):
    """``continue_final_message``: how lm-eval's chat mode prefills the start of an answer to score."""
    messages = [*CONVERSATIONS[name][:-1], {"role": "assistant", "content": "  The answer is "}]
    theirs = hf.apply_chat_template(messages, tokenize=False, continue_final_message=True)
    ours = LLAMA3.render(messages, continue_final_message=True)
    assert ours.text == theirs and ours.text.endswith("The answer is")
    with pytest.raises(Exception, match="exclude each other"):
        LLAMA3.render(messages, continue_final_message=True, add_generation_prompt=True)


def test_a_conversations_tools_render_as_transformers_renders_them(hf, tokenizer_file):
    """A record's ``tools`` reach the template as ``apply_chat_template(..., tools=...)`` passes them."""
    template = (
        "{% if tools %}<|start_header_id|>tools<|end_header_id|>\n{% for tool in tools %}{{ tool | tojson }}"
        "\n{% endfor %}<|eot_id|>{% endif %}" + LLAMA3.text
    )
    tools = [
        {"type": "function", "function": {"name": "add", "description": "a + b, as numbers: é"}},
        {"name": "legacy", "parameters": {"type": "object", "properties": {}}},
    ]
    messages = CONVERSATIONS["a tool turn"]
    theirs = hf.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False)
    ours = ChatTemplate(template, "tools.jinja", LLAMA3.special_tokens).render(messages, tools=tools)
    assert ours.text == theirs and '"name": "legacy"' in ours.text
