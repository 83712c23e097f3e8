"""Conversations from JSON Lines and Parquet: read in order with their places, every bad one named in one
line (or skipped and counted when asked), and text that is not UTF-8 handled as the policy says."""

import gzip
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from meltemi.datastore.build.inputs.files import describe_source
from meltemi.datastore.build.inputs.sources import ReadNotes, ReadPolicy
from meltemi.datastore.chat.conversations import ROLES, Conversation, checked_messages, read_conversations
from meltemi.datastore.errors import BadLineError, InputError, InvalidUtf8Error

HELLO = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


def _read(path, policy=None, notes=None, field="messages", split_bytes=None):
    policy = ReadPolicy() if policy is None else policy
    notes = ReadNotes() if notes is None else notes
    pieces = describe_source(str(path), split_bytes=split_bytes).pieces()
    return [c for piece in pieces for c in read_conversations(piece, policy, notes, field=field)]


def _jsonl(path, *records) -> str:
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in records]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_conversations_come_in_file_order_with_their_lines_and_every_key_kept(tmp_path):
    tool = {"role": "tool", "content": "42", "name": "calc"}
    path = _jsonl(
        tmp_path / "a.jsonl",
        {"messages": HELLO, "id": 7},
        "",
        {"messages": [{"role": "system", "content": "Be brief."}, tool]},
    )
    conversations = _read(path)
    assert conversations == [
        Conversation(tuple(HELLO), f"{path}, line 1"),
        Conversation(({"role": "system", "content": "Be brief."}, tool), f"{path}, line 3"),
    ]


def test_gzipped_lines_and_a_file_cut_in_pieces_read_the_same(tmp_path):
    records = [{"messages": [{"role": "user", "content": f"question {i}"}]} for i in range(200)]
    plain = _jsonl(tmp_path / "a.jsonl", *records)
    with gzip.open(tmp_path / "b.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
    whole = _read(plain)
    cut = _read(plain, split_bytes=1000)
    assert len(describe_source(plain, split_bytes=1000).pieces()) > 3
    assert cut == whole and len(whole) == 200 and whole[-1].place == f"{plain}, line 200"
    assert [c.messages for c in _read(tmp_path / "b.jsonl.gz")] == [c.messages for c in whole]


def test_another_field_can_hold_the_messages(tmp_path):
    path = _jsonl(tmp_path / "a.jsonl", {"conversation": HELLO})
    assert _read(path, field="conversation")[0].messages == tuple(HELLO)


BAD = [
    ("not json", "not valid JSON (Expecting value at column 1)"),
    ("[1, 2]", "not a JSON object with a 'messages' field (it is a list)"),
    (
        {"text": "hello"},
        "no 'messages' field, nor a 'prompt' and a 'completion', nor ShareGPT's 'conversations', nor "
        "Alpaca's 'instruction' and 'output', nor messages under conversation, dialog, dialogue, chat, turns "
        "or text (its fields: text); pass --text-field FIELD to name the field that holds the messages",
    ),
    ({"prompt": "2 + 2?"}, "no 'messages' field, nor a 'prompt' and a 'completion'"),
    ({"instruction": "Add.", "output": 4}, "field 'output' is a number, not a string"),
    ({"instruction": "Add.", "input": ["2"], "output": "4"}, "field 'input' is a list, not a string"),
    (
        {"instruction": "Add.", "output": "4", "history": [["Hi"]]},
        "field 'history' is not a list of [query, ",
    ),
    (
        {"prompt": "2 + 2?", "completion": 4},
        "field 'completion' is a number, not a string or a list of messages",
    ),
    ({"prompt": [], "completion": "4"}, "field 'prompt' is an empty list, not a non-empty list of messages"),
    (
        {"prompt": "2 + 2?", "completion": [{"role": "bot", "content": "4"}]},
        "message 1 has role 'bot', not one of " + ", ".join(ROLES),
    ),
    ({"messages": []}, "field 'messages' is an empty list, not a non-empty list of messages (objects)"),
    ({"messages": "Hi"}, "field 'messages' is a string, not a non-empty list of messages (objects)"),
    ({"messages": [HELLO[0], 3]}, "message 2 is a number, not an object"),
    ({"messages": [{"content": "Hi"}]}, "message 1 has no string 'role'"),
    ({"messages": [{"role": 1, "content": "Hi"}]}, "message 1 has no string 'role' (it is a number)"),
    ({"messages": [HELLO[0], {"role": "assistant", "content": None}]}, "message 2 has no string 'content'"),
    (
        {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
        "has no string 'content' (it is a list)",
    ),
    (
        {"messages": [{"role": "bot", "content": "Hi"}]},
        "message 1 has role 'bot', not one of " + ", ".join(ROLES),
    ),
    (
        {"messages": [HELLO[0], {"role": "assistant", "tool_calls": {"function": {"name": "f"}}}]},
        "message 2: 'tool_calls' is an object, not a list of calls",
    ),
    (
        {"messages": [HELLO[0], {"role": "assistant", "content": None, "tool_calls": [{"name": "f"}]}]},
        "message 2: tool call 1 names no function (function.name)",
    ),
    (
        {"messages": [HELLO[0], {"role": "assistant", "content": None, "tool_calls": []}]},
        "message 2 has no string 'content'",
    ),
    (
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "bot", "value": "Hello"}]},
        "conversations: turn 2 is from 'bot', not one of human, user, gpt, assistant, system, tool",
    ),
    (
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": None}]},
        "message 2 has no string 'content'",
    ),
]


@pytest.mark.parametrize(("record", "why"), BAD)
def test_a_bad_conversation_is_one_line_naming_the_file_the_line_and_what_is_wrong(tmp_path, record, why):
    path = _jsonl(tmp_path / "a.jsonl", {"messages": HELLO}, record)
    with pytest.raises(BadLineError) as caught:
        _read(path)
    assert str(caught.value).startswith(f"{path}, line 2: ") and why in str(caught.value)
    assert "\n" not in str(caught.value)


class Flags:
    """A program's wording of the remedies: its flag for each `build_store` keyword it offers."""

    def __init__(self, flags: dict[str, str]):
        self.flags = flags

    def flag(self, keyword, value):
        return None if keyword not in self.flags else self.flags[keyword].format(value)

    def rerun(self, changes, request):
        return None


def test_the_remedy_for_another_field_is_said_only_when_the_caller_offers_one(tmp_path):
    path = _jsonl(tmp_path / "a.jsonl", {"text": "hello"})
    with pytest.raises(BadLineError) as caught:
        _read(path, field="chat")
    cause = (
        "line 1: no 'chat' field, nor a 'prompt' and a 'completion', nor ShareGPT's 'conversations', nor "
        "Alpaca's 'instruction' and 'output' (its fields: text)"
    )
    assert caught.value.say(Flags({})).endswith(cause)
    assert caught.value.say(Flags({"text_field": "--data.chat.messages_field {}"})).endswith(
        f"{cause}; pass --data.chat.messages_field FIELD to name the field that holds the messages"
    )
    assert str(caught.value).endswith(
        f"{cause}; pass --text-field FIELD to name the field that holds the messages"
    )


OTHER_NAMES = [
    {"dialog": HELLO},
    {"conversation": [dict(m, turn=i) for i, m in enumerate(HELLO)], "model": "x", "language": "en"},
    {"chat": HELLO},
    {"turns": HELLO},
    {"text": HELLO},
    {"dialogue": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]},
]


@pytest.mark.parametrize("record", OTHER_NAMES, ids=lambda record: next(iter(record)))
def test_messages_under_the_names_other_data_sets_give_them_are_read_by_default(tmp_path, record):
    """lmsys-chat's and WildChat's `conversation` (each message with more keys), `dialog`, `chat`, `turns`,
    `text` holding a list, and ShareGPT's turns under one of them; a named field reads only that one."""
    path = _jsonl(tmp_path / "a.jsonl", record)
    [conversation] = _read(path)
    assert [(m["role"], m["content"]) for m in conversation.messages] == [
        ("user", "Hi"),
        ("assistant", "Hello"),
    ]
    with pytest.raises(BadLineError, match=r"line 1: no 'talk' field, nor .* and 'output' \(its fields: "):
        _read(path, field="talk")


def test_messages_under_a_name_no_format_uses_are_named_with_the_flag_that_reads_them(tmp_path):
    path = _jsonl(tmp_path / "a.jsonl", {"id": 3, "tools": [], "exchange": HELLO})
    with pytest.raises(BadLineError) as caught:
        _read(path)
    assert re.search(
        r"line 1: no 'messages' field, .* \(its fields: id, tools, exchange\); field 'exchange' holds a list "
        r"of objects: if they are the messages, pass --data\.chat\.messages_field exchange$",
        caught.value.say(Flags({"text_field": "--data.chat.messages_field {}"})),
    )
    assert _read(path, field="exchange")[0].messages == tuple(HELLO)
    pq.write_table(pa.table({"id": [1], "exchange": pa.array([HELLO], MESSAGES)}), tmp_path / "a.parquet")
    with pytest.raises(
        InputError,
        match=r"a\.parquet: no column 'messages', .* \(columns: id, exchange\); column 'exchange' holds "
        r"lists of structs: if they are the messages, pass --text-field exchange$",
    ):
        _read(tmp_path / "a.parquet")
    pq.write_table(pa.table({"id": [1], "conversation": pa.array([HELLO], MESSAGES)}), tmp_path / "b.parquet")
    assert [c.messages for c in _read(tmp_path / "b.parquet")] == [tuple(dict(m, name=None) for m in HELLO)]


def test_skipping_bad_conversations_counts_and_names_each(tmp_path):
    records = [record for record, _ in BAD]
    path = _jsonl(tmp_path / "a.jsonl", {"messages": HELLO}, *records, {"messages": HELLO[:1]})
    notes = ReadNotes()
    conversations = _read(path, ReadPolicy(skip_bad_lines=True), notes)
    assert [c.place for c in conversations] == [f"{path}, line 1", f"{path}, line {len(BAD) + 2}"]
    assert notes.counts["refused_conversations"] == len(BAD) and "skipped_lines" not in notes.counts
    assert [line.split(": ", 1)[0] for line in notes.skipped_lines] == [
        f"{path}, line {n}" for n in range(2, len(BAD) + 2)
    ]
    assert all(why in line for line, (_, why) in zip(notes.skipped_lines, BAD, strict=True))


def test_invalid_utf8_is_an_error_or_skipped_or_repaired_as_for_text(tmp_path):
    good = json.dumps({"messages": HELLO}).encode()
    bad = b'{"messages": [{"role": "user", "content": "caf\xe9 \xff"}]}'
    path = tmp_path / "a.jsonl"
    path.write_bytes(good + b"\n" + bad + b"\n" + good + b"\n")
    byte = len(good) + 1 + bad.index(b"\xe9")
    with pytest.raises(InvalidUtf8Error, match=rf"a\.jsonl, line 2: not UTF-8 text at byte {byte} \(0xe9"):
        _read(path)
    notes = ReadNotes()
    assert [c.place[-6:] for c in _read(path, ReadPolicy(invalid_utf8="skip"), notes)] == ["line 1", "line 3"]
    assert notes.counts["invalid_utf8_documents"] == 1 and notes.invalid_utf8_files == {str(path)}
    notes = ReadNotes()
    repaired = _read(path, ReadPolicy(invalid_utf8="replace"), notes)
    assert (
        repaired[1].messages[0]["content"] == "caf\ufffd \ufffd"
        and notes.counts["invalid_utf8_documents"] == 1
    )


def test_an_escaped_lone_surrogate_anywhere_in_the_messages_is_not_text_either(tmp_path):
    record = (
        '{"messages": [{"role": "user", "content": "a \\ud800"}, {"role": "tool", "content": "\\udfff"}]}'
    )
    path = _jsonl(tmp_path / "a.jsonl", {"messages": HELLO}, record)
    with pytest.raises(
        InvalidUtf8Error, match=r"a\.jsonl, line 2 \(byte \d+\): .*lone surrogate \(\\ud800\)"
    ):
        _read(path)
    notes = ReadNotes()
    assert len(_read(path, ReadPolicy(invalid_utf8="skip"), notes)) == 1
    assert notes.counts["invalid_utf8_documents"] == 1
    notes = ReadNotes()
    repaired = _read(path, ReadPolicy(invalid_utf8="replace"), notes)[1].messages
    assert [m["content"] for m in repaired] == ["a \ufffd", "\ufffd"] and notes.counts[
        "invalid_utf8_documents"
    ] == 1


def test_plain_text_is_not_a_chat_source(tmp_path):
    (tmp_path / "a.txt").write_text("Hi there")
    with pytest.raises(
        InputError,
        match=r"a\.txt: a chat source must be JSON \(.jsonl, .json\), Parquet or Arrow \(each may be "
        r"compressed: .jsonl.gz, .json.zst\) with a 'messages'",
    ):
        _read(tmp_path / "a.txt")


def test_a_json_file_is_read_as_json_lines_or_as_one_array_of_records(tmp_path):
    """As Hugging Face datasets reads a `.json` file: lines of records, or one array of them (Alpaca's and
    ShareGPT's exports), pretty-printed or not; a bad record is named by its item in the array."""
    records = [{"messages": HELLO}, {"prompt": "Hi", "completion": "Hello"}]
    lines = _jsonl(tmp_path / "lines.json", *records)
    (tmp_path / "array.json").write_text("\n  " + json.dumps(records, indent=2))
    expected = [(tuple(HELLO), 0), (tuple(HELLO), 1)]
    assert [(c.messages, c.prompt_messages) for c in _read(lines)] == expected
    from_array = _read(tmp_path / "array.json")
    assert [(c.messages, c.prompt_messages) for c in from_array] == expected
    assert [c.place for c in from_array] == [f"{tmp_path / 'array.json'}, item {i}" for i in (1, 2)]
    (tmp_path / "bad.json").write_text(
        json.dumps([records[0], {"messages": [{"role": "bot", "content": "?"}]}])
    )
    with pytest.raises(BadLineError, match=r"bad\.json, item 2: message 1 has role 'bot'"):
        _read(tmp_path / "bad.json")
    notes = ReadNotes()
    assert len(_read(tmp_path / "bad.json", ReadPolicy(skip_bad_lines=True), notes)) == 1
    assert notes.counts["refused_conversations"] == 1 and "item 2" in notes.skipped_lines[0]
    (tmp_path / "cut.json").write_text(json.dumps([records[0]])[:-1] + ', {"mess')
    with pytest.raises(InputError, match=r"cut\.json: not valid JSON \(.* at line 1, column \d+\)$"):
        _read(tmp_path / "cut.json")
    (tmp_path / "escaped.json").write_text('[{"messages": [{"role": "user", "content": "a\\ud800"}]}]')
    with pytest.raises(InvalidUtf8Error, match="escaped.json, item 1"):
        _read(tmp_path / "escaped.json")


def test_a_prompt_and_its_completion_are_one_conversation_whose_prompt_is_not_trained(tmp_path):
    system = {"role": "system", "content": "Be brief."}
    path = _jsonl(
        tmp_path / "a.jsonl",
        {"prompt": [system, *HELLO, HELLO[0]], "completion": [HELLO[1]]},
        {"prompt": "Hi", "completion": "Hello", "id": 3},
        {"messages": HELLO, "prompt": "a field of its own"},
    )
    assert _read(path) == [
        Conversation((system, *HELLO, *HELLO), f"{path}, line 1", prompt_messages=4),
        Conversation(tuple(HELLO), f"{path}, line 2", prompt_messages=1),
        Conversation(tuple(HELLO), f"{path}, line 3"),
    ]


SHAREGPT = [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]


def test_a_records_tools_are_read_as_a_list_or_as_its_json_text_in_json_and_parquet(tmp_path):
    tools = [{"type": "function", "function": {"name": "add", "description": "a + b"}}]
    path = _jsonl(
        tmp_path / "a.jsonl",
        {"messages": HELLO, "tools": tools},
        {"messages": HELLO, "tools": json.dumps(tools)},
        {"messages": HELLO, "tools": None},
        {"messages": HELLO, "tools": "{not json"},
        {"messages": HELLO, "tools": {"add": 1}},
    )
    notes = ReadNotes()
    read = _read(path, ReadPolicy(skip_bad_lines=True), notes)
    assert [c.tools for c in read] == [tuple(tools), tuple(tools), None]
    assert [line.split("a.jsonl, ")[1] for line in notes.skipped_lines] == [
        "line 4: 'tools' is text that is not JSON (Expecting property name enclosed in double quotes at "
        "column 2)",
        "line 5: 'tools' is an object, not a list of tool definitions (objects)",
    ]
    messages = pa.array([HELLO, HELLO])
    pq.write_table(pa.table({"messages": messages, "tools": [json.dumps(tools), ""]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"messages": messages, "tools": [tools, []]}), tmp_path / "b.parquet")
    for name in ("a.parquet", "b.parquet"):
        assert [c.tools for c in _read(tmp_path / name)] == [tuple(tools), None]
    pq.write_table(pa.table({"messages": messages, "tools": [1, 2]}), tmp_path / "c.parquet")
    with pytest.raises(InputError, match=r"c.parquet: column 'tools' holds int64, not tool definitions"):
        _read(tmp_path / "c.parquet")


def test_llama_factorys_function_calls_and_observations_are_tool_calls_and_tool_results(tmp_path):
    call = {"name": "add", "arguments": {"a": 2, "b": 2}}
    turns = [
        {"from": "human", "value": "2 + 2?"},
        {"from": "function_call", "value": json.dumps(call)},
        {"from": "observation", "value": "4"},
        {"from": "gpt", "value": "It is 4."},
    ]
    both = [*turns[:1], {"from": "function_call", "value": json.dumps([call, call])}, *turns[2:]]
    bad = [*turns[:1], {"from": "function_call", "value": "add(2, 2)"}, *turns[2:]]
    path = _jsonl(tmp_path / "a.jsonl", {"conversations": turns}, {"conversations": both},
                  {"conversations": bad})  # fmt: skip
    notes = ReadNotes()
    first, second = _read(path, ReadPolicy(skip_bad_lines=True), notes)
    as_call = {"type": "function", "function": call}
    assert first.messages == (
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "content": None, "tool_calls": [as_call]},
        {"role": "tool", "content": "4"},
        {"role": "assistant", "content": "It is 4."},
    )
    assert second.messages[1]["tool_calls"] == [as_call, as_call]
    assert notes.skipped_lines[0].endswith(
        "line 3: conversations: turn 2 (function_call) is not the JSON text of a call "
        '({"name": ..., "arguments": ...}) or of a list of them'
    )


def test_sharegpt_turns_are_messages_with_the_records_system_prompt_first(tmp_path):
    """ShareGPT's `conversations` of `from`/`value` turns (OpenThoughts', Bespoke-Stratos'), in JSON or
    Parquet, read as the messages they are, a `system` field or column before them; in the messages field
    itself too."""
    system = {"role": "system", "content": "Think first."}
    path = _jsonl(
        tmp_path / "a.jsonl",
        {"conversations": SHAREGPT, "system": "Think first."},
        {"conversations": [{"from": "system", "value": "Think first."}, *SHAREGPT], "system": "ignored"},
        {"messages": SHAREGPT},
        {"conversations": SHAREGPT, "system": ""},
    )
    assert [c.messages for c in _read(path)] == [
        (system, *HELLO),
        (system, *HELLO),
        tuple(HELLO),
        tuple(HELLO),
    ]
    turn = pa.struct([("from", pa.string()), ("value", pa.string())])
    table = pa.table(
        {"system": ["Think first.", None], "conversations": pa.array([SHAREGPT, SHAREGPT], pa.list_(turn))}
    )
    pq.write_table(table, tmp_path / "a.parquet")
    assert [c.messages for c in _read(tmp_path / "a.parquet")] == [(system, *HELLO), tuple(HELLO)]
    pq.write_table(table.set_column(0, "system", pa.array([1, 2])), tmp_path / "b.parquet")
    with pytest.raises(
        InputError, match=r"b\.parquet: column 'system' holds int64, not text \(a system prompt\)"
    ):
        _read(tmp_path / "b.parquet")


def test_alpaca_records_are_a_users_instruction_and_the_assistants_output(tmp_path):
    """Stanford Alpaca's `instruction`, `input`, `output` (and LLaMA-Factory's `system`, `history`), in JSON
    Lines and in Parquet, as LLaMA-Factory reads them: the instruction and a non-empty input joined by a
    newline."""
    asked = {"role": "user", "content": "Add the numbers.\n2 + 2"}
    path = _jsonl(
        tmp_path / "a.jsonl",
        {"instruction": "Add the numbers.", "input": "2 + 2", "output": "4"},
        {"instruction": "Hi", "input": "", "output": "Hello"},
        {"instruction": "Hi", "output": "Hello", "system": "Be brief.", "history": [["Q", "A"]]},
    )
    assert [c.messages for c in _read(path)] == [
        (asked, {"role": "assistant", "content": "4"}),
        tuple(HELLO),
        (
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Q"},
            {"role": "assistant", "content": "A"},
            *HELLO,
        ),
    ]
    table = pa.table({"instruction": ["Add the numbers.", "Hi"], "input": ["2 + 2", None],
                      "output": ["4", "Hello"]})  # fmt: skip
    pq.write_table(table, tmp_path / "a.parquet")
    assert [c.messages for c in _read(tmp_path / "a.parquet")] == [
        (asked, {"role": "assistant", "content": "4"}),
        tuple(HELLO),
    ]
    pq.write_table(table.set_column(2, "output", pa.array([4, 5])), tmp_path / "b.parquet")
    with pytest.raises(InputError, match=r"b\.parquet: column 'output' holds int64, not text"):
        _read(tmp_path / "b.parquet")


def test_a_message_that_calls_tools_needs_no_content(tmp_path):
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}
    calling = [
        HELLO[0],
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "4"},
        {"role": "assistant", "tool_calls": [call]},
    ]
    assert _read(_jsonl(tmp_path / "a.jsonl", {"messages": calling}))[0].messages == tuple(calling)


def test_an_empty_file_is_counted(tmp_path):
    (tmp_path / "a.jsonl").write_text("\n\n")
    notes = ReadNotes()
    assert _read(tmp_path / "a.jsonl", notes=notes) == [] and notes.counts["empty_files"] == 1


MESSAGES = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string()), ("name", pa.string())]))


def _parquet(path, rows, kind=MESSAGES) -> str:
    pq.write_table(pa.table({"id": list(range(len(rows))), "messages": pa.array(rows, kind)}), path)
    return str(path)


def test_parquet_rows_are_conversations_named_by_row(tmp_path):
    first = [
        {"role": "user", "content": "Hi", "name": None},
        {"role": "assistant", "content": "Yo", "name": "b"},
    ]
    path = _parquet(tmp_path / "a.parquet", [first, HELLO])
    conversations = _read(path)
    assert [c.place for c in conversations] == [f"{path}, row 1", f"{path}, row 2"]
    assert conversations[0].messages == tuple(first)
    assert conversations[1].messages[0] == {"role": "user", "content": "Hi", "name": None}
    large = pa.large_list(pa.struct([("role", pa.large_string()), ("content", pa.large_string())]))
    assert [c.messages for c in _read(_parquet(tmp_path / "b.parquet", [HELLO], large))] == [tuple(HELLO)]


def test_bad_parquet_rows_are_named_or_skipped_and_counted(tmp_path):
    path = _parquet(tmp_path / "a.parquet", [HELLO, None, [{"role": "bot", "content": "?"}], HELLO])
    with pytest.raises(
        BadLineError, match=r"a\.parquet, row 2: field 'messages' is null, not a non-empty list"
    ):
        _read(path)
    notes = ReadNotes()
    assert [c.place[-5:] for c in _read(path, ReadPolicy(skip_bad_lines=True), notes)] == ["row 1", "row 4"]
    assert notes.counts["refused_conversations"] == 2 and notes.skipped_lines[1].endswith(
        "not one of " + ", ".join(ROLES)
    )


def test_a_parquet_file_without_a_column_of_conversations_is_an_error_naming_it(tmp_path):
    pq.write_table(pa.table({"text": ["hello"]}), tmp_path / "a.parquet")
    with pytest.raises(
        InputError,
        match=r"a\.parquet: no column 'messages', nor a 'prompt' and a 'completion', nor ShareGPT's "
        r"'conversations', nor Alpaca's 'instruction' and 'output', nor messages in conversation, dialog, "
        r"dialogue, chat, turns or text \(columns: text\); pass --text-field FIELD to name the column",
    ):
        _read(tmp_path / "a.parquet")
    pq.write_table(pa.table({"messages": ["hello"]}), tmp_path / "b.parquet")
    with pytest.raises(InputError, match=r"b\.parquet: column 'messages' holds string, not conversations"):
        _read(tmp_path / "b.parquet")


def test_parquet_prompt_and_completion_columns_of_text_or_messages(tmp_path):
    strings = pa.table({"prompt": ["Hi", "Hey"], "completion": ["Hello", None]})
    pq.write_table(strings, tmp_path / "a.parquet")
    notes = ReadNotes()
    read = _read(tmp_path / "a.parquet", ReadPolicy(skip_bad_lines=True), notes)
    assert read == [Conversation(tuple(HELLO), f"{tmp_path / 'a.parquet'}, row 1", prompt_messages=1)]
    assert notes.skipped_lines == [
        f"{tmp_path / 'a.parquet'}, row 2: field 'completion' is null, not a string or a list of messages"
    ]
    messages = pa.table(
        {"prompt": pa.array([HELLO[:1]], MESSAGES), "completion": pa.array([HELLO[1:]], MESSAGES)}
    )
    pq.write_table(messages, tmp_path / "b.parquet")
    assert [(c.messages[1], c.prompt_messages) for c in _read(tmp_path / "b.parquet")] == [
        ({"role": "assistant", "content": "Hello", "name": None}, 1)
    ]
    pq.write_table(pa.table({"prompt": ["Hi"], "completion": [1]}), tmp_path / "c.parquet")
    with pytest.raises(
        InputError, match=r"c\.parquet: column 'completion' holds int64, not text or a list of messages"
    ):
        _read(tmp_path / "c.parquet")


def test_a_parquet_string_that_is_not_utf8_is_handled_as_the_policy_says(tmp_path):
    raw = pa.list_(pa.struct([("role", pa.binary()), ("content", pa.binary())]))
    rows = [[{"role": b"user", "content": b"caf\xe9"}, {"role": b"assistant", "content": b"\xff"}], HELLO]
    strings = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    table = pa.table({"messages": pa.array(rows, raw).cast(strings, safe=False)})
    pq.write_table(table, tmp_path / "a.parquet")
    with pytest.raises(InvalidUtf8Error, match=r"a\.parquet, row 1: not UTF-8 text at byte 3 of the row"):
        _read(tmp_path / "a.parquet")
    notes = ReadNotes()
    assert [c.place[-5:] for c in _read(tmp_path / "a.parquet", ReadPolicy(invalid_utf8="skip"), notes)] == [
        "row 2"
    ]
    assert notes.counts["invalid_utf8_documents"] == 1
    notes = ReadNotes()
    repaired = _read(tmp_path / "a.parquet", ReadPolicy(invalid_utf8="replace"), notes)[0].messages
    assert [m["content"] for m in repaired] == ["caf\ufffd", "\ufffd"] and notes.counts[
        "invalid_utf8_documents"
    ] == 1


def test_checked_messages_keeps_the_messages_as_given():
    messages = [{"content": "Hi", "role": "user", "extra": {"k": [1]}}]
    assert checked_messages(messages) == tuple(messages)
    with pytest.raises(BadLineError, match="field 'chat' is null"):
        checked_messages(None, "chat")
