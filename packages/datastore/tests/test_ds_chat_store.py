"""Chat stores: conversations built into tokens and loss weights that zarr-python reads, the same bytes for
any worker count and after a resumed build, every refusal, cut and drop counted, and packed whole into rows
whose segments, positions and weights are the store's."""

import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from tokenizers import AddedToken, Tokenizer

from meltemi.datastore import (
    BadLineError,
    BatchLoader,
    PackedDataset,
    TokenStore,
    build_store,
    corpora,
    hold_out_conversations,
)
from meltemi.datastore.chat.stdlib import stdlib_chat
from meltemi.datastore.chat.template import ChatTemplate
from meltemi.datastore.errors import ChatTemplateError, InputError
from meltemi.datastore.layout import LOSS_WEIGHTS


@pytest.fixture(scope="module")
def chat_jsonl(tmp_path_factory, stdlib_files) -> str:
    """About 200 conversations about the first stdlib files' functions."""
    return stdlib_chat(tmp_path_factory.mktemp("chat") / "chat.jsonl", files=stdlib_files)


OPTIONS = {"format": "chat", "chunk_tokens": 512, "shard_tokens": 4096, "progress": False}


@pytest.fixture(scope="module")
def chat_store(tmp_path_factory, chat_jsonl, tokenizer_path):
    out = tmp_path_factory.mktemp("chat-store") / "store"
    build_store(chat_jsonl, tokenizer_path, out, **OPTIONS)
    return out


def write_lines(path, records) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return str(path)


def talk(*turns):
    roles = ["user", "assistant"] * len(turns)
    return {"messages": [{"role": role, "content": text} for role, text in zip(roles, turns, strict=False)]}


@pytest.mark.filterwarnings("ignore:Object at manifest.json is not recognized")
def test_zarr_python_reads_the_tokens_and_the_loss_weights(chat_store):
    store = TokenStore.open(chat_store)
    group = zarr.open(chat_store, mode="r")
    assert sorted(group.array_keys()) == ["loss_weights", "offsets", "offsets_index", "tokens"]
    assert group[LOSS_WEIGHTS].dtype == np.uint8 and group[LOSS_WEIGHTS].shape == group["tokens"].shape
    assert np.array_equal(group[LOSS_WEIGHTS][:], store.arrays[LOSS_WEIGHTS].read(0, store.num_tokens))
    assert store.is_chat and store.manifest["format"] == "chat"
    assert set(np.unique(group[LOSS_WEIGHTS][:]).tolist()) == {0, 1}


def test_each_conversation_is_its_rendered_text_and_weighs_the_assistants_answer_and_end_of_turn(
    chat_store, chat_jsonl, tokenizer_path
):
    store, tokenizer = TokenStore.open(chat_store), Tokenizer.from_file(tokenizer_path)
    eot = tokenizer.token_to_id("<|eot_id|>")
    assert store.manifest["chat"]["end_of_turn_id"] == eot
    conversations = [json.loads(line) for line in open(chat_jsonl, encoding="utf-8")]
    assert store.num_docs == len(conversations)
    for i in (0, 7, len(conversations) - 1):
        ids, weights = store.doc(i), store.doc_weights(i)
        text = tokenizer.decode(ids.tolist(), skip_special_tokens=False)
        answer = conversations[i]["messages"][-1]["content"]
        assert text.startswith("<|begin_of_text|>") and text.count("<|begin_of_text|>") == 1
        assert (
            tokenizer.decode(ids[weights == 1].tolist(), skip_special_tokens=False) == answer + "<|eot_id|>"
        )
        assert ids[-1] == eot and weights[-1] == 1 and weights[0] == 0


def test_the_same_bytes_for_any_worker_count_and_after_a_resumed_build(
    chat_jsonl, tokenizer_path, tmp_path, tree_bytes, chat_store
):
    build_store(chat_jsonl, tokenizer_path, tmp_path / "two", workers=2, **OPTIONS)
    assert tree_bytes(tmp_path / "two") == tree_bytes(chat_store)
    lines = open(chat_jsonl, encoding="utf-8").read().splitlines()
    data = write_lines(tmp_path / "chat.jsonl", [*lines[:150], "{not json", *lines[150:]])
    once, resumed = tmp_path / "once", tmp_path / "resumed"
    build_store(data, tokenizer_path, once, skip_bad_lines=True, unit_bytes=10_000, **OPTIONS)
    with pytest.raises(BadLineError, match="line 151"):  # stops midway, keeping the units done
        build_store(data, tokenizer_path, resumed, unit_bytes=10_000, **OPTIONS)
    assert list((resumed / ".build" / "parts").glob("*.json"))
    build_store(data, tokenizer_path, resumed, skip_bad_lines=True, unit_bytes=10_000, **OPTIONS)
    assert tree_bytes(resumed) == tree_bytes(once)


def test_long_conversations_are_cut_or_dropped_and_counted(tmp_path, tokenizer_path):
    data = write_lines(tmp_path / "c.jsonl", [talk("hi", "short"), talk("a long question " * 40, "x"),
                                               talk("q", "a long answer " * 40)])  # fmt: skip
    cut = build_store(data, tokenizer_path, tmp_path / "cut", format="chat", max_tokens=40, progress=False)
    store = TokenStore.open(tmp_path / "cut")
    # the long question leaves no assistant token within 40: dropped; the long answer is cut to 40 tokens
    assert cut.counts == {"dropped_conversations": 1, "truncated_conversations": 1}
    assert store.num_docs == 2 and int(np.diff(store.offsets[0:3]).max()) == 40
    assert store.manifest["counts"]["truncated_conversations"] == 1
    dropped = build_store(
        data, tokenizer_path, tmp_path / "drop", format="chat", max_tokens=40, overlong="drop", progress=False
    )
    assert dropped.counts == {"dropped_conversations": 2} and dropped.documents == 1
    assert "built 1 conversation, " in dropped.summary() and "2 dropped conversations" in dropped.summary()


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("{not json", r"chat.jsonl, line 2: not valid JSON"),
        ('{"text": "no conversation"}', r"chat.jsonl, line 2: no 'messages' field"),
        ('{"messages": [{"role": "bot", "content": "hi"}]}', r"chat.jsonl, line 2: .*role 'bot'"),
        (
            '{"messages": [{"role": "user", "content": "only a question"}]}',
            r"chat.jsonl, line 2: no assistant",
        ),
    ],
)
def test_a_conversation_that_cannot_be_trained_on_stops_the_build_naming_it_or_is_skipped_and_counted(
    tmp_path, tokenizer_path, line, why
):
    data = write_lines(tmp_path / "chat.jsonl", [talk("q", "a"), line, talk("q2", "a2")])
    with pytest.raises(BadLineError, match=why):
        build_store(data, tokenizer_path, tmp_path / "store", format="chat", progress=False)
    assert not (tmp_path / "store" / "manifest.json").exists()
    report = build_store(
        data, tokenizer_path, tmp_path / "store", format="chat", skip_bad_lines=True, progress=False
    )
    assert report.documents == 2 and report.counts == {"refused_conversations": 1}
    assert (
        TokenStore.open(tmp_path / "store")
        .manifest["skipped_lines"][0]
        .endswith(report.skipped_lines[0].split(", ")[-1])
    )


def test_a_template_without_generation_blocks_trains_the_turns_its_renders_of_beginnings_show(
    tmp_path, tokenizer_path, chat_jsonl, chat_store, tree_bytes
):
    shipped = ChatTemplate.llama3().text
    plain = tmp_path / "plain.jinja"  # the shipped text, each block a plain `if`: the same renders
    plain.write_text(
        shipped.replace("{% generation %}", "{% if true %}").replace("{% endgeneration", "{% endif")
    )
    build_store(chat_jsonl, tokenizer_path, tmp_path / "a", chat_template=plain, **OPTIONS)
    found, blocks = TokenStore.open(tmp_path / "a"), TokenStore.open(chat_store)
    assert found.manifest["content_sha256"] == blocks.manifest["content_sha256"]  # tokens and weights
    assert found.manifest["chat"]["assistant_tokens"].startswith("renders of the conversation up to each")
    assert blocks.manifest["chat"]["assistant_tokens"] == "the template's {% generation %} blocks"
    report = build_store(  # training on every token renders each conversation once
        chat_jsonl, tokenizer_path, tmp_path / "b", chat_template=plain, loss_on="all", **OPTIONS
    )
    assert int(TokenStore.open(tmp_path / "b").doc_weights(0).min()) == 1 and report.documents > 0
    assert TokenStore.open(tmp_path / "b").manifest["chat"]["assistant_tokens"] is None


def test_a_turn_that_does_not_end_with_the_end_of_turn_token_is_refused_unless_it_is_named(
    tmp_path, tokenizer_path, chat_jsonl
):
    outside = tmp_path / "outside.jinja"
    outside.write_text(
        "{% for m in messages %}{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}"
        "{% endgeneration %}<|eot_id|>{% else %}{{ m['content'] }}<|eot_id|>{% endif %}{% endfor %}"
    )
    with pytest.raises(
        ChatTemplateError,
        match=r"block holds no <\|eot_id\|> \(first at .*chat.jsonl, line 1, character \d+\), .* put "
        r"<\|eot_id\|> inside the block, or name the token its turns end with",
    ):
        build_store(chat_jsonl, tokenizer_path, tmp_path / "c", chat_template=outside, **OPTIONS)
    unended = tmp_path / "unended.jinja"  # no token after an answer: the end of a turn cannot be found
    unended.write_text(
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    with pytest.raises(
        ChatTemplateError,
        match=r"^.*chat.jsonl, line 1: chat template .*unended.jinja: message 2 \(the assistant's\) renders "
        r"without <\|eot_id\|> .* \(end_of_turn; --data.chat.end_of_turn when training\)$",
    ):
        build_store(chat_jsonl, tokenizer_path, tmp_path / "e", chat_template=unended, **OPTIONS)
    assert not (tmp_path / "e" / "manifest.json").exists()
    headers = tmp_path / "headers.jinja"  # each turn ends with <|end_header_id|>, not the eos_token: found
    headers.write_text(
        "{% for m in messages %}{{ m.role }}: {{ m.content }}<|end_header_id|>{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    build_store(chat_jsonl, tokenizer_path, tmp_path / "d", chat_template=headers, **OPTIONS)
    store, tokenizer = TokenStore.open(tmp_path / "d"), Tokenizer.from_file(tokenizer_path)
    answer = json.loads(open(chat_jsonl, encoding="utf-8").readline())["messages"][-1]["content"]
    ids, weights = store.doc(0), store.doc_weights(0)
    assert (
        tokenizer.decode(ids[weights == 1].tolist(), skip_special_tokens=False)
        == answer + "<|end_header_id|>"
    )
    assert store.manifest["chat"]["end_of_turn"] == "<|end_header_id|>"
    assert store.manifest["chat"]["end_of_turn_id"] == tokenizer.token_to_id("<|end_header_id|>")


def test_a_prompt_and_its_completion_train_the_completions_tokens_only(tmp_path, tokenizer_path):
    question, answer = {"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}
    earlier = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    records = [
        {"prompt": [*earlier, question], "completion": [answer]},
        {"prompt": "2 + 2?", "completion": "4"},
    ]
    build_store(write_lines(tmp_path / "pc.jsonl", records), tokenizer_path, tmp_path / "pc", **OPTIONS)
    as_messages = [{"messages": [*earlier, question, answer]}, {"messages": [question, answer]}]
    build_store(write_lines(tmp_path / "m.jsonl", as_messages), tokenizer_path, tmp_path / "m", **OPTIONS)
    pc, messages = TokenStore.open(tmp_path / "pc"), TokenStore.open(tmp_path / "m")
    tokenizer = Tokenizer.from_file(tokenizer_path)
    for i in range(2):
        assert np.array_equal(pc.doc(i), messages.doc(i))  # the same text: a conversation, its prompt first
        trained = pc.doc(i)[pc.doc_weights(i) == 1].tolist()
        assert tokenizer.decode(trained, skip_special_tokens=False) == "4<|eot_id|>"
    assert tokenizer.decode(messages.doc(0)[messages.doc_weights(0) == 1].tolist()) == "Hello4"
    looking_back = tmp_path / "looking_back.jinja"  # the last message is rendered as no other is
    looking_back.write_text(
        "{% for m in messages %}{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|eot_id|>"
        "{% endgeneration %}{% else %}{{ m['content'] }}{% if loop.last %}?{% endif %}<|eot_id|>{% endif %}"
        "{% endfor %}"
    )
    with pytest.raises(ChatTemplateError, match=r"pc.jsonl, line 1: .*the prompt renders otherwise when its"):
        build_store(
            tmp_path / "pc.jsonl", tokenizer_path, tmp_path / "x", chat_template=looking_back, **OPTIONS
        )


def test_a_directory_of_chat_data_is_read_for_its_data_files_only(tmp_path, tokenizer_path):
    dataset = tmp_path / "dataset"  # laid out as a Hugging Face data set's repository
    (dataset / "data").mkdir(parents=True)
    write_lines(dataset / "data" / "train.jsonl", [talk("q", "a"), talk("q2", "a2")])
    (dataset / "README.md").write_text("---\nlicense: mit\n---\n# A chat data set\n")
    report = build_store(dataset, tokenizer_path, tmp_path / "store", **OPTIONS)
    assert report.documents == 2
    assert [s["url"] for s in TokenStore.open(tmp_path / "store").manifest["sources"]] == [
        str(dataset / "data" / "train.jsonl")
    ]
    with pytest.raises(InputError, match=r"README.md: a chat source must be JSON \("):  # named: read
        build_store([dataset / "README.md"], tokenizer_path, tmp_path / "named", **OPTIONS)
    (dataset / "data" / "train.jsonl").unlink()
    (dataset / "data" / "train.csv").write_text("prompt,completion\nq,a\n")
    with pytest.raises(
        InputError,
        match=r"dataset'?: holds no file ending .jsonl, .json, .parquet, .arrow "
        r"\(or those compressed: .gz, .zst, .zstd, .bz2, .xz\) \(2 other files: README.md, train.csv\)$",
    ):
        build_store(dataset, tokenizer_path, tmp_path / "none", **OPTIONS)


def test_a_data_set_whose_files_name_splits_is_read_for_its_train_split(tmp_path, tokenizer_path):
    """As `load_dataset(dir)` names splits (sharded files' whole names first): its train split, or the only
    one for training (UltraChat's `train_sft`), is read, not its test and validation conversations, and the
    summary says how many files were left out and which split was read; splits with no train split, or with
    several, are refused naming them."""
    dataset = tmp_path / "train_sets" / "ultrachat"  # a split's word above the data set does not count
    (dataset / "data").mkdir(parents=True)
    write_lines(dataset / "data" / "train_sft-00000-of-00002.jsonl", [talk("q", "a")])
    write_lines(dataset / "data" / "train_sft-00001-of-00002.jsonl", [talk("q2", "a2")])
    write_lines(dataset / "data" / "test_sft-00000-of-00001.jsonl", [talk("t", "t")])
    write_lines(dataset / "data" / "validation.jsonl", [talk("v", "v")])
    report = build_store(dataset, tokenizer_path, tmp_path / "store", **OPTIONS)
    assert report.documents == 2 and report.counts["other_split_files"] == 2
    assert "2 files of the data set's other splits left out (its train_sft split read)" in report.summary()
    manifest = TokenStore.open(tmp_path / "store").manifest
    assert (manifest["split"], manifest["other_splits"]) == ("train_sft", {"none": 1, "test_sft": 1})
    again = build_store(dataset, tokenizer_path, tmp_path / "store", **OPTIONS)
    assert again.already_built and again.other_splits == {"none": 1, "test_sft": 1}
    names = [s["url"].rpartition("/")[2] for s in TokenStore.open(tmp_path / "store").manifest["sources"]]
    assert names == ["train_sft-00000-of-00002.jsonl", "train_sft-00001-of-00002.jsonl"]
    test = build_store(dataset, tokenizer_path, tmp_path / "test", split="test_sft", **OPTIONS)
    assert test.documents == 1 and "(its test_sft split read)" in test.summary()
    with pytest.raises(InputError, match=r"its files name the splits test_sft, train_sft, not dev"):
        build_store(dataset, tokenizer_path, tmp_path / "dev", split="dev", **OPTIONS)
    write_lines(dataset / "data" / "train_gen-00000-of-00001.jsonl", [talk("g", "g")])
    with pytest.raises(
        InputError,
        match=r"splits test_sft, train_gen, train_sft, of which train_gen and train_sft are for training; "
        r"name the files of the one to train on \(as .*ultrachat/data/train_gen-\*\)",
    ):
        build_store(dataset, tokenizer_path, tmp_path / "two", **OPTIONS)
    for name in (
        "train_sft-00000-of-00002.jsonl",
        "train_sft-00001-of-00002.jsonl",
        "train_gen-00000-of-00001.jsonl",
    ):
        (dataset / "data" / name).unlink()
    with pytest.raises(InputError, match=r"its files name the splits test_sft but no train split"):
        build_store(dataset, tokenizer_path, tmp_path / "none", **OPTIONS)
    (dataset / "data" / "test_sft-00000-of-00001.jsonl").unlink()
    with pytest.raises(InputError, match=r"its files name the splits validation but no train split"):
        build_store(
            dataset, tokenizer_path, tmp_path / "none", **OPTIONS
        )  # by its word, when none is sharded
    named = build_store(
        [dataset / "data" / "validation.jsonl"], tokenizer_path, tmp_path / "named", **OPTIONS
    )
    assert named.documents == 1  # a file named itself is read, whatever its name


def test_a_data_set_saved_to_disk_is_read_from_its_arrow_files_split_by_split(tmp_path, tokenizer_path):
    """`DatasetDict.save_to_disk` writes each split's Arrow stream under the split's name, with records of
    its own beside them: the train split's conversations are read, its records are not data."""
    import pyarrow as pa

    saved = tmp_path / "saved"
    for split, rows in (("train", [talk("q", "a"), talk("q2", "a2")]), ("test", [talk("t", "t")])):
        (saved / split).mkdir(parents=True)
        table = pa.Table.from_pylist(rows)
        with pa.OSFile(str(saved / split / "data-00000-of-00001.arrow"), "wb") as sink:
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
        (saved / split / "state.json").write_text('{"_data_files": []}')
        (saved / split / "dataset_info.json").write_text("{}")
    (saved / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    report = build_store(saved, tokenizer_path, tmp_path / "store", **OPTIONS)
    assert report.documents == 2 and report.counts["other_split_files"] == 1


def test_a_json_array_in_a_directory_is_data_and_the_records_of_a_saved_data_set_are_not(
    tmp_path, tokenizer_path
):
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "train.json").write_text(json.dumps([talk("q", "a"), talk("q2", "a2")]))
    for record in ("dataset_info.json", "state.json"):  # what datasets' save_to_disk writes beside its data
        (dataset / record).write_text('{"citation": ""}')
    report = build_store(dataset, tokenizer_path, tmp_path / "store", **OPTIONS)
    assert report.documents == 2
    assert [s["url"] for s in TokenStore.open(tmp_path / "store").manifest["sources"]] == [
        str(dataset / "train.json")
    ]


TOOLS_TEMPLATE = (  # the shipped layout, and an assistant's tool calls written as JSON in its turn
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] | default('') }}"
    "{% for call in m['tool_calls'] | default([]) %}{{ call['function'] | tojson }}{% endfor %}<|eot_id|>"
    "{% endgeneration %}{% else %}{{ m['content'] }}<|eot_id|>{% endif %}{% endfor %}"
)


def test_tool_calls_are_trained_when_the_template_writes_them_and_refused_when_it_drops_them(
    tmp_path, tokenizer_path
):
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 2}}}
    calling = [
        {"role": "user", "content": "2 + 2? Call add."},  # the name in the prompt: not the call trained
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "4"},
        {"role": "assistant", "content": "4"},
    ]
    data = write_lines(tmp_path / "tools.jsonl", [talk("q", "a"), {"messages": calling}])
    with pytest.raises(
        ChatTemplateError,
        match=r"tools.jsonl, line 2: chat template .*: it does not write message 2's tool call \('add'",
    ):
        build_store(data, tokenizer_path, tmp_path / "shipped", **OPTIONS)
    (tmp_path / "tools.jinja").write_text(TOOLS_TEMPLATE)
    build_store(data, tokenizer_path, tmp_path / "tools", chat_template=tmp_path / "tools.jinja", **OPTIONS)
    store, tokenizer = TokenStore.open(tmp_path / "tools"), Tokenizer.from_file(tokenizer_path)
    trained = tokenizer.decode(store.doc(1)[store.doc_weights(1) == 1].tolist(), skip_special_tokens=False)
    assert trained == '{"name": "add", "arguments": {"a": 2}}<|eot_id|>4<|eot_id|>'


def test_a_conversations_tools_are_rendered_for_the_model_and_a_template_that_never_reads_them_is_refused(
    tmp_path, tokenizer_path
):
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    data = write_lines(tmp_path / "tools.jsonl", [talk("q", "a") | {"tools": tools}])
    with pytest.raises(
        ChatTemplateError,
        match=r"tools.jsonl, line 1: chat template the shipped llama3 template: it never reads the "
        r"conversation's tools, so a model would learn to call tools it was never shown",
    ):
        build_store(data, tokenizer_path, tmp_path / "shipped", **OPTIONS)
    listing = (
        "{% if tools %}<|start_header_id|>tools<|end_header_id|>\n{{ tools | tojson }}<|eot_id|>{% endif %}"
    )
    (tmp_path / "tools.jinja").write_text(
        TOOLS_TEMPLATE.replace("{{ bos_token }}", "{{ bos_token }}" + listing)
    )
    build_store(data, tokenizer_path, tmp_path / "tools", chat_template=tmp_path / "tools.jinja", **OPTIONS)
    store, tokenizer = TokenStore.open(tmp_path / "tools"), Tokenizer.from_file(tokenizer_path)
    ids, weights = store.doc(0), store.doc_weights(0)
    text = tokenizer.decode(ids.tolist(), skip_special_tokens=False)
    assert f"tools<|end_header_id|>\n{json.dumps(tools)}<|eot_id|>" in text
    assert tokenizer.decode(ids[weights == 1].tolist(), skip_special_tokens=False) == "a<|eot_id|>"


def test_a_tokenizer_without_the_templates_tokens_is_refused_before_any_work(
    tmp_path, stdlib_files, chat_jsonl
):
    plain = corpora.train_tokenizer(
        stdlib_files[:5], 300, tmp_path / "t.json", special_tokens=("<|endoftext|>",)
    )
    with pytest.raises(InputError, match=r"has no token <\|eot_id\|>.*which the chat template"):
        build_store(chat_jsonl, plain, tmp_path / "store", format="chat", progress=False)
    assert not (tmp_path / "store" / ".build").exists()


@pytest.fixture(scope="module")
def row_store(tmp_path_factory, chat_jsonl, tokenizer_path):
    """The conversations of ``chat_store`` that fit rows of 256 tokens (longer ones cut)."""
    out = tmp_path_factory.mktemp("row-store") / "store"
    build_store(chat_jsonl, tokenizer_path, out, max_tokens=256, **OPTIONS)
    return out


def test_a_store_of_longer_conversations_than_a_row_says_how_to_read_or_rebuild_it(chat_store, row_store):
    with pytest.raises(
        ValueError, match=r"more than a row of 256 holds .* any length, or rebuild it with max_tokens 256"
    ):
        PackedDataset(TokenStore.open(chat_store), seq_len=255)
    with pytest.raises(ValueError, match=r"read it in rows of at least 256 tokens"):
        PackedDataset(TokenStore.open(row_store), seq_len=127)


def test_packed_rows_hold_whole_conversations_with_their_positions_and_weights(row_store):
    store = TokenStore.open(row_store)
    packed = PackedDataset(store, seq_len=255)
    assert packed.fill > 0.75 and "rows of 256 tokens" in packed.report()
    rows = packed.read(np.arange(packed.num_sequences))
    seen = []
    for r in range(len(rows.tokens)):
        members = packed.packing.row(r)
        at = 0
        for j, i in enumerate(members.tolist()):
            ids, weights = store.doc(i), store.doc_weights(i)
            span = slice(at, at + len(ids))
            assert rows.tokens[r, span].tolist() == ids.tolist()
            assert rows.weights[r, span].tolist() == weights.tolist()
            assert rows.positions[r, span].tolist() == list(range(len(ids)))
            assert set(rows.segment_ids[r, span].tolist()) == {j}
            at += len(ids)
        assert not rows.weights[r, at:].any() and (rows.segment_ids[r, at:] == len(members)).all()
        seen += members.tolist()
    assert sorted(seen) == list(range(store.num_docs))


def test_the_held_out_conversations_are_the_stores_last_and_no_batch_trains_across_two(row_store):
    store = TokenStore.open(row_store)
    train, held = hold_out_conversations(store, 255, 0.1)
    assert held.first == train.stop and held.stop == store.num_docs
    assert held.stop - held.first == round(store.num_docs * 0.1)
    batch = BatchLoader(train, 4).batch(0)
    rows = train.read(np.arange(4))
    first_tokens = (
        rows.positions[:, 1:] == 0
    )  # a conversation's first token is never a target of the one before
    assert not (batch["loss_mask"] & first_tokens).any()
    assert (batch["loss_mask"] <= (rows.weights[:, 1:] > 0)).all()


LIBRARY = Path(__file__).resolve().parents[3] / "tests" / "chat_templates" / "trl"  # published templates
ASKED = [
    {"role": "user", "content": "What does len do?"},
    {"role": "assistant", "content": "It counts."},
    {"role": "user", "content": "And sorted?"},
    {"role": "assistant", "content": "It sorts."},
]


def _tokenizer_directory(directory, tokenizer_path, eos_token, template, *tokens) -> Path:
    """A tokenizer directory: the stdlib tokenizer with the template's `tokens`, and its configuration."""
    directory.mkdir()
    tokenizer = Tokenizer.from_file(tokenizer_path)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in tokens])
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"bos_token": "<|begin_of_text|>", "eos_token": eos_token, "chat_template": template}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


@pytest.mark.parametrize(
    ("name", "tokens", "said"),
    [
        (
            "qwen2_5_training",
            ("<|im_start|>", "<|im_end|>"),
            "\nIt counts.<|im_end|>\n\nIt sorts.<|im_end|>\n",
        ),
        ("qwen3_training", ("<|im_start|>", "<|im_end|>", "<think>", "</think>"), None),
        (
            "gemma_training",
            ("<start_of_turn>", "<end_of_turn>"),
            "It counts.<end_of_turn>\nIt sorts.<end_of_turn>\n",
        ),
        ("phi3_training", ("<|user|>", "<|assistant|>", "<|end|>"), None),
    ],
)
def test_a_generation_block_that_goes_on_after_the_end_of_turn_is_built_and_trains_what_follows_it(
    tmp_path, tokenizer_path, name, tokens, said
):
    """TRL's training templates hold a newline after the end-of-turn token in their blocks (issue 63's
    first fault: refused as though it were outside): built, the newline trained as transformers marks it."""
    template = (LIBRARY / f"{name}.jinja").read_text(encoding="utf-8")
    eos = "<|endoftext|>" if name.startswith("phi3") else tokens[-1] if name.startswith("qwen") else "<eos>"
    directory = _tokenizer_directory(tmp_path / "tok", tokenizer_path, eos, template, *tokens, eos)
    data = write_lines(tmp_path / "chat.jsonl", [{"messages": ASKED}])
    build_store(data, directory / "tokenizer.json", tmp_path / "store", chat_template=directory, **OPTIONS)
    store, tokenizer = (
        TokenStore.open(tmp_path / "store"),
        Tokenizer.from_file(str(directory / "tokenizer.json")),
    )
    trained = tokenizer.decode(store.doc(0)[store.doc_weights(0) == 1].tolist(), skip_special_tokens=False)
    end = store.manifest["chat"]["end_of_turn"]
    assert trained.count(end + "\n") == 2 and "What does len do?" not in trained
    assert said is None or trained == said


def test_phi3s_own_template_ends_each_turn_at_its_end_token_not_at_the_eos_that_ends_the_text(
    tmp_path, tokenizer_path
):
    """Phi-3's template writes its eos, `<|endoftext|>`, only after the whole text (issue 63's second fault:
    the user's next turns were trained up to it, silently): the end of turn is `<|end|>`, the token it
    writes after each answer, and no user's token is trained."""
    template = (LIBRARY / "phi3.jinja").read_text(encoding="utf-8")
    tokens = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
    directory = _tokenizer_directory(tmp_path / "tok", tokenizer_path, "<|endoftext|>", template, *tokens)
    data = write_lines(tmp_path / "chat.jsonl", [{"messages": ASKED}])
    build_store(data, directory / "tokenizer.json", tmp_path / "store", chat_template=directory, **OPTIONS)
    store, tokenizer = (
        TokenStore.open(tmp_path / "store"),
        Tokenizer.from_file(str(directory / "tokenizer.json")),
    )
    assert store.manifest["chat"]["end_of_turn"] == "<|end|>"
    assert store.manifest["chat"]["assistant_tokens"].startswith("renders of the conversation")
    trained = tokenizer.decode(store.doc(0)[store.doc_weights(0) == 1].tolist(), skip_special_tokens=False)
    assert trained == "It counts.<|end|>It sorts.<|end|>"
    with pytest.raises(  # named the eos, the turn would run into the user's message: refused, naming it
        ChatTemplateError,
        match=r"message 2's turn \(the assistant's\) reaches <\|endoftext\|> only after message 3's text, "
        r"so a model would be trained on that user's tokens; name the token its turns end with",
    ):
        build_store(
            data, directory / "tokenizer.json", tmp_path / "eos", chat_template=directory,
            end_of_turn="<|endoftext|>", **OPTIONS,
        )  # fmt: skip
