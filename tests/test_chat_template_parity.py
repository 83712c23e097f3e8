"""Our chat templates give exactly what transformers gives: the rendered string, the token ids and the
assistant mask of ``apply_chat_template(..., return_assistant_tokens_mask=True)`` on the same tokenizer
directory, for the shipped template, for templates read from a ``tokenizer_config.json``, and for a library
of published templates (tests/chat_templates: TRL's folder and models' own), all through the chat room's
one encode path (``chat.build.encode_conversation``), which a store's build and a chat model's prompt use.

The tokenizer is a small byte-level BPE trained once per module on standard-library files, so it has the
chat template's special tokens.
"""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer, processors

from meltemi.datastore import TokenStore, build_store, corpora
from meltemi.datastore.build.inputs.sources import ReadNotes, ReadPolicy
from meltemi.datastore.chat.build import encode_conversation, encode_conversations
from meltemi.datastore.chat.conversations import Conversation
from meltemi.datastore.chat.recipe import ChatRecipe
from meltemi.datastore.chat.template import BEGIN_OF_TEXT, END_OF_TURN, ChatTemplate, assistant_mask
from meltemi.datastore.errors import ChatTemplateError


def transformers_tokenizer(directory):
    """transformers' tokenizer of a directory, the library imported at first use: every xdist worker
    imports this module to collect it, and only the one that runs it needs transformers (1.7 CPU-s)."""
    needed = "transformers is not installed: the parity tests compare with it (the `interop` group)"
    transformers = pytest.importorskip("transformers", reason=needed)
    return transformers.AutoTokenizer.from_pretrained(directory)


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
    return transformers_tokenizer(llama3_dir)


def _same(hf_tokenizer, template, tokenizer, messages, add_generation_prompt=False, chat_template=None):
    """Our string, ids and mask equal transformers' (the encode path's, whose check of the turns' ends a
    template whose blocks hold no end of turn fails: then the mask primitive's); returns ours."""
    if chat_template == GLUED:
        rendered = template.render(messages)
        encoding = tokenizer.encode(rendered.text, add_special_tokens=False)
        mask = assistant_mask(encoding, rendered.generation_spans)
        theirs = hf_tokenizer.apply_chat_template(
            messages, chat_template=GLUED, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        assert encoding.ids == list(theirs["input_ids"]) and mask.tolist() == list(theirs["assistant_masks"])
        with pytest.raises(ChatTemplateError, match=r"holds no <\|eot_id\|> \(first at the conversation"):
            encode_conversation(tokenizer, ChatRecipe(template), messages)
        return rendered, encoding.ids, mask
    options = {"add_generation_prompt": add_generation_prompt, "chat_template": chat_template}
    text = hf_tokenizer.apply_chat_template(messages, tokenize=False, **options)
    theirs = hf_tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True, **options
    )
    rendered = template.render(messages, add_generation_prompt=add_generation_prompt)
    encoded = encode_conversation(
        tokenizer, ChatRecipe(template), messages, add_generation_prompt=add_generation_prompt
    )
    assert rendered.text == encoded.text == text
    assert encoded.ids == list(theirs["input_ids"])
    assert encoded.weights.tolist() == list(theirs["assistant_masks"])
    return rendered, encoded.ids, encoded.weights


@pytest.mark.parametrize("add_generation_prompt", [False, True])
@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_the_shipped_template_matches_transformers(hf, tokenizer_file, name, add_generation_prompt):
    tokenizer = Tokenizer.from_file(tokenizer_file)
    messages = CONVERSATIONS[name]
    _, ids, mask = _same(hf, LLAMA3, tokenizer, messages, add_generation_prompt)
    bos = tokenizer.token_to_id(BEGIN_OF_TEXT)
    assert ids[0] == bos and ids[1:].count(bos) == sum(m["content"].count(BEGIN_OF_TEXT) for m in messages)
    assert mask.sum() >= sum(m["role"] == "assistant" for m in messages)


def test_a_stores_batched_encoding_is_the_one_at_a_time_encoding(tokenizer_file):
    tokenizer, recipe = Tokenizer.from_file(tokenizer_file), ChatRecipe(LLAMA3)
    trained = {name: m for name, m in CONVERSATIONS.items() if any(x["content"] for x in m[1:])}
    conversations = [Conversation(tuple(m), name) for name, m in trained.items()]
    batched = encode_conversations(tokenizer, conversations, recipe, np.int32, ReadPolicy(), ReadNotes())
    at = 0
    for messages, length in zip(trained.values(), batched.lengths.tolist(), strict=True):
        alone = encode_conversation(tokenizer, recipe, messages)
        assert batched.tokens[at : at + length].tolist() == alone.ids
        assert batched.weights[at : at + length].tolist() == alone.weights.tolist()
        at += length


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
            "tool_calls": [{"type": "function", "function": {"name": "sort", "arguments": {"b": 1, "a": 2}}}],
        },
        {"role": "assistant", "content": "Encore.", "reasoning": "more"},
    ]
    ours = ChatTemplate.from_tokenizer_config(directory)
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    rendered, _, _ = _same(transformers_tokenizer(directory), ours, tokenizer, messages)
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
    hf_tokenizer = transformers_tokenizer(directory)
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
        transformers_tokenizer(directory),
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


# The library of published templates (tests/chat_templates/README.md says where each came from), each in a
# tokenizer directory of its own with its model's bos and eos tokens, the tokenizer knowing every token any
# of them writes.
LIBRARY = Path(__file__).parent / "chat_templates"
PUBLISHED = sorted(LIBRARY.glob("*/*.jinja"))
FAMILIES = {  # a template's name starts with its family's: (bos_token, eos_token) of the models that ship it
    "cohere": ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    "deepseek": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "diffusion_gemma": ("<bos>", "<eos>"),
    "gemma": ("<bos>", "<eos>"),
    "glm4moe": (None, "<|endoftext|>"),
    "gptoss": (None, "<|return|>"),
    "idefics3": ("<|begin_of_text|>", "<end_of_utterance>"),
    "lfm2": ("<|startoftext|>", "<|im_end|>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "llava_next": ("<s>", "</s>"),
    "mistral": ("<s>", "</s>"),
    "nemotron": ("<s>", "<|im_end|>"),
    "phi3": ("<s>", "<|endoftext|>"),  # Phi-3's eos ends the whole text; its turns end with <|end|>
    "qwen": (None, "<|im_end|>"),
}
TOKEN_SHAPES = re.compile(
    r"<\|?[A-Za-z_]\w*\|?>|<\|[^<>|\s'\"]+\|>|<｜[^<>\s'\"]+｜>|</?[A-Za-z_]\w*>|\[/?[A-Z_]+\]"
)
CALL = {
    "id": "call12345",
    "type": "function",
    "function": {"name": "add_numbers", "arguments": {"a": 2, "b": 2}},
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add_numbers",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            },
        },
    }
]
ASKED = [  # (role, content) of two exchanges
    {"role": "user", "content": "What does len do?"},
    {"role": "assistant", "content": "It counts the items."},
    {"role": "user", "content": "And sorted?"},
    {"role": "assistant", "content": "It returns a new sorted list."},
]
LIBRARY_CONVERSATIONS = {  # name: (messages, tools)
    "two exchanges": (ASKED, None),
    "a system message": ([SYSTEM, *ASKED], None),
    "a tool call": (
        [
            {"role": "user", "content": "What is two plus two?"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {
                "role": "tool",
                "content": "Four, computed.",
                "tool_call_id": "call12345",
                "name": "add_numbers",
            },
            {"role": "assistant", "content": "It is four."},
        ],
        TOOLS,
    ),
    "reasoning": (
        [
            {"role": "user", "content": "What is two plus two?"},
            {"role": "assistant", "content": "It is four.", "reasoning_content": "Two and two make four."},
            {"role": "user", "content": "And three plus three?"},
            {"role": "assistant", "content": "It is six.", "reasoning_content": "Three and three make six."},
        ],
        None,
    ),
}
# What our encode path refuses, with the reason (transformers renders them, and marks no token, or all of a
# turn but its end); anything else it must encode as transformers does.
BEFORE_DIFFERS = "the generation prompt, renders otherwise when that message follows"  # <think> in the prompt
REFUSED = {
    ("deepseek_r1_distill", "*"): BEFORE_DIFFERS,
    ("deepseekv3", "*"): BEFORE_DIFFERS,
    ("nemotron_3_nano", "*"): BEFORE_DIFFERS,
    ("nemotron_3_super", "*"): BEFORE_DIFFERS,
    ("nemotron_3_ultra", "*"): BEFORE_DIFFERS,
    ("qwen3_5_nothink", "two exchanges"): BEFORE_DIFFERS,
    ("qwen3_5_nothink", "a system message"): BEFORE_DIFFERS,
    ("qwen3_5_nothink", "reasoning"): BEFORE_DIFFERS,
    ("qwen3_5_think", "two exchanges"): BEFORE_DIFFERS,
    ("qwen3_5_think", "a system message"): BEFORE_DIFFERS,
    ("qwen3_5_think", "reasoning"): BEFORE_DIFFERS,
    ("qwen3_6", "two exchanges"): BEFORE_DIFFERS,
    ("qwen3_6", "a system message"): BEFORE_DIFFERS,
    ("qwen3_6", "reasoning"): BEFORE_DIFFERS,
    ("glm4moe", "*"): "renders without <|endoftext|> after the generation prompt",  # no end-of-turn token
    ("gptoss", "two exchanges"): "renders without <|end|> after the generation prompt",
    ("gptoss", "a system message"): "renders without <|end|> after the generation prompt",
    ("gptoss", "a tool call"): "renders without <|end|> after the generation prompt",
    ("diffusion_gemma", "a tool call"): "renders without <turn|>",
    ("diffusion_gemma_training", "a tool call"): "{% generation %} block holds no <turn|>",
    (
        "glm4moe_training",
        "a tool call",
    ): "{% generation %} block holds no <|user|>",  # <|observation|> follows
    ("gptoss_training", "a tool call"): "{% generation %} block holds no <|end|>",  # the call ends <|call|>
    ("lfm2", "a tool call"): "it does not write message 2's tool call",  # as TRL's README says
    ("lfm2_training", "a tool call"): "it does not write message 2's tool call",
}
CASES = [
    (path, name)
    for path in PUBLISHED
    for name in LIBRARY_CONVERSATIONS
    if not (name == "a tool call" and not re.search(r"\btools\b", path.read_text(encoding="utf-8")))
    and not (
        name == "reasoning" and not re.search(r"reasoning_content|thinking", path.read_text(encoding="utf-8"))
    )
]


def _family(path: Path) -> tuple[str | None, str]:
    return next(tokens for family, tokens in FAMILIES.items() if path.stem.startswith(family))


@pytest.fixture(scope="module")
def library(tmp_path_factory, tokenizer_file):
    """Each published template's tokenizer directory, its transformers tokenizer (loaded once) and ours."""
    root = tmp_path_factory.mktemp("library")
    written = {t for path in PUBLISHED for t in TOKEN_SHAPES.findall(path.read_text(encoding="utf-8"))}
    written |= {t for path in PUBLISHED for t in _family(path) if t}
    tokenizer = Tokenizer.from_file(tokenizer_file)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in sorted(written)])
    tokenizer.save(str(root / "tokenizer.json"))
    loaded = {}

    def load(path: Path):
        if path not in loaded:
            bos, eos = _family(path)
            directory = root / f"{path.parent.name}-{path.stem}"
            directory.mkdir()
            shutil.copy(root / "tokenizer.json", directory / "tokenizer.json")
            config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos}
            config |= {} if bos is None else {"bos_token": bos}
            (directory / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False))
            shutil.copy(path, directory / "chat_template.jinja")
            loaded[path] = (directory, transformers_tokenizer(directory))
        return loaded[path]

    load.tokenizer = tokenizer
    return load


def _spans_of(text: str, needle: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(re.escape(needle), text)] if needle else []


@pytest.mark.parametrize(("path", "name"), CASES, ids=[f"{p.stem}-{n.replace(' ', '-')}" for p, n in CASES])
def test_a_published_template_encodes_as_transformers_does(library, path, name):
    """The string and ids equal transformers'; the mask too where the template has generation blocks
    (a newline after the end of turn inside a block trained, as transformers marks it). Without blocks, no
    token of a user's, system's or tool's message is trained, and each assistant turn is one run ending with
    its end-of-turn token. A conversation transformers cannot render is refused by ours too, and what our
    path refuses is only what REFUSED names, for its reason."""
    directory, hf = library(path)
    messages, tools = LIBRARY_CONVERSATIONS[name]
    template = ChatTemplate.from_tokenizer_config(directory)
    recipe = ChatRecipe(template)
    try:
        theirs = hf.apply_chat_template(
            messages, tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
    except Exception:  # the template refuses the conversation (roles, system messages, content's type)
        with pytest.raises(ChatTemplateError):
            template.render(messages, tools=tools)
        return
    assert template.render(messages, tools=tools).text == hf.apply_chat_template(
        messages, tools=tools, tokenize=False
    )
    refused = REFUSED.get((path.stem, name), REFUSED.get((path.stem, "*")))
    if refused is not None:
        with pytest.raises(ChatTemplateError, match=re.escape(refused)):
            encode_conversation(library.tokenizer, recipe, messages, tools=tools)
        return
    encoded = encode_conversation(library.tokenizer, recipe, messages, tools=tools)
    assert encoded.ids == list(theirs["input_ids"])
    if template.has_generation_blocks:
        assert encoded.weights.tolist() == list(theirs["assistant_masks"])
        return
    offsets = library.tokenizer.encode(encoded.text, add_special_tokens=False).offsets
    trained = [offsets[i] for i in np.flatnonzero(encoded.weights)]
    for message in messages:
        if message["role"] != "assistant":
            for a, b in _spans_of(encoded.text, message["content"]):
                assert not [(x, y) for x, y in trained if x < b and a < y], (message, encoded.text)
    edges = np.diff(np.concatenate([[0], encoded.weights.astype(np.int8), [0]]))
    last_tokens = np.array(encoded.ids)[np.flatnonzero(edges == -1) - 1]
    assert len(last_tokens) == sum(m["role"] == "assistant" for m in messages)
    assert set(last_tokens.tolist()) == {library.tokenizer.token_to_id(recipe.turn_end)}


def test_the_library_holds_the_templates_that_showed_the_faults():
    names = {path.stem for path in PUBLISHED}
    assert {
        "qwen2_5_training",
        "qwen3_training",
        "gemma_training",
        "phi3_training",
        "lfm2_2_5",
        "phi3",
    } <= names
    assert len(CASES) > 150


FAULT_ONE = ["qwen2_5_training", "qwen3_training", "gemma_training", "phi3_training", "lfm2_2_5"]


@pytest.mark.parametrize("stem", FAULT_ONE)
def test_a_block_that_goes_on_after_the_end_of_turn_builds_a_store_with_transformers_mask(
    library, tmp_path, stem
):
    """Fault 1 at the build: a `{% generation %}` block holding `<|im_end|>\\n` (or `<end_of_turn>\\n`) was
    refused; the store's weights are now transformers' mask, the newline after the end of turn trained."""
    [path] = [p for p in PUBLISHED if p.stem == stem]
    directory, hf = library(path)
    conversations = [
        ASKED,
        ASKED[:2],
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}],
    ]
    store = _chat_store(tmp_path, directory, conversations)
    for i, messages in enumerate(conversations):
        theirs = hf.apply_chat_template(
            messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        assert store.doc(i).tolist() == list(theirs["input_ids"])
        assert store.doc_weights(i).tolist() == list(theirs["assistant_masks"])
    trained = store.doc(0)[store.doc_weights(0) == 1].tolist()
    end = store.manifest["chat"]["end_of_turn"]
    assert end + "\n" in library.tokenizer.decode(trained, skip_special_tokens=False)


def test_phi3s_own_template_trains_no_users_turn_and_ends_each_turn_at_its_end_token(library, tmp_path):
    """Fault 2 at the build: Phi-3's template writes its eos `<|endoftext|>` only after the whole text, so
    a turn ending at the eos took in the user's following turns; its turns end with `<|end|>`, as TRL's
    training template for it marks them (which trains the newline after it, and the final eos, too)."""
    [path] = [p for p in PUBLISHED if p.stem == "phi3"]
    [training] = [p for p in PUBLISHED if p.stem == "phi3_training"]
    directory, _ = library(path)
    _, trl = library(training)
    store = _chat_store(tmp_path, directory, [ASKED])
    assert store.manifest["chat"]["end_of_turn"] == "<|end|>"
    ids, weights = store.doc(0).tolist(), store.doc_weights(0)
    said = library.tokenizer.decode(
        [i for i, w in zip(ids, weights, strict=True) if w], skip_special_tokens=False
    )
    assert said == "It counts the items.<|end|>It returns a new sorted list.<|end|>"
    theirs = trl.apply_chat_template(
        ASKED, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    assert list(theirs["input_ids"]) == ids  # the same text: what we train, TRL's template trains too
    assert all(theirs["assistant_masks"][i] for i in np.flatnonzero(weights))


def _chat_store(tmp_path, directory, conversations) -> TokenStore:
    """A chat store of `conversations` (lists of messages) built with the tokenizer and template of the
    tokenizer `directory`."""
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps({"messages": m}) + "\n" for m in conversations))
    build_store(
        data,
        directory / "tokenizer.json",
        tmp_path / "store",
        chat_template=directory,
        format="chat",
        progress=False,
    )
    return TokenStore.open(tmp_path / "store")
