"""Chat sources: conversations read from JSON (Lines, or one array), Parquet or Arrow, checked, each with
where it came from.

A conversation is a list of messages, each an object with a string `role` (one of `ROLES`) and a string
`content` (which a message calling tools, with `tool_calls`, may leave out or null), and any other keys
(`name`, ...), which a chat template may read. In JSON Lines (`.jsonl`) each line is an object
holding the list in a field (`messages` by default); a `.json` file holds such lines or one array of such
objects (as Hugging Face datasets reads either); in Parquet (Hugging Face datasets' exports) or Arrow (its
`save_to_disk`) a column holds it as a list of structs. A line or row without that field may hold a prompt and
its completion instead (TRL's prompt-completion datasets): `prompt` and `completion`, each a list of messages
or a string (one user message, one assistant message); the conversation is the two joined, and only the
completion is trained (`Conversation.prompt_messages`). Or it may hold ShareGPT's `conversations`, turns of
`from` (`human`, `gpt`, `system`, `tool`; LLaMA-Factory's `function_call`, a call as JSON text, and
`observation`, its result) and `value`, read as messages after its `system` text (`sharegpt_messages`), as
Axolotl and LLaMA-Factory read them. Or Alpaca's `instruction`, optional `input`, and `output` (Stanford
Alpaca's and its derivatives' form, with LLaMA-Factory's optional `system` and `history`), read as a user's
message and the assistant's reply (`alpaca_messages`). Or, when the field read is the default `messages`, the
messages (or ShareGPT turns) under a name other data sets use (`MESSAGE_FIELDS`: lmsys-chat's and WildChat's
`conversation`, `dialog`, `dialogue`, `chat`, `turns`, or `text` holding a list); under any other name, the
error names the fields the record has and how to name the one that holds them. A conversation that is not
such a list stops the read naming its file and line (or row), or is skipped and noted when the policy skips
bad lines; one that is not UTF-8 text is handled as a document is (`ReadPolicy.invalid_utf8`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from meltemi.datastore.build.inputs.sources import (
    LONE_SURROGATE,
    TABLE_KINDS,
    Piece,
    Place,
    ReadNotes,
    ReadPolicy,
    decode_document,
    holds_json_array,
    parsed_or_refused,
    read_json_array,
    read_jsonl,
    without_surrogates,
)
from meltemi.datastore.build.inputs.tables import open_table
from meltemi.datastore.errors import BadLineError, InputError, Remedy, Way

ROLES = ("system", "user", "assistant", "tool")
REFUSED = "refused_conversations"  # the count of bad conversations skipped, in `ReadNotes.counts`


PROMPT, COMPLETION = "prompt", "completion"  # TRL's prompt-completion fields
TOOLS = "tools"  # the definitions of the tools a conversation may call, beside its messages
SHAREGPT, SYSTEM = "conversations", "system"  # ShareGPT's turns, and the system prompt beside them
INSTRUCTION, INPUT, OUTPUT, HISTORY = "instruction", "input", "output", "history"  # Alpaca's fields
MESSAGES = "messages"  # the field read by default
# Other names data sets give a conversation's messages, read when a record has no `messages` (in this order)
MESSAGE_FIELDS = ("conversation", "dialog", "dialogue", "chat", "turns", "text")
SHAREGPT_ROLES = {  # who speaks a ShareGPT turn (its `from`) -> the role of its message
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
    "observation": "tool",  # LLaMA-Factory's: a tool's result
    "function_call": "assistant",  # LLaMA-Factory's: a call, its value `{"name", "arguments"}` as JSON
}


@dataclass(frozen=True)
class Conversation:
    """A conversation's messages, and where it is (`/data/a.jsonl, line 3`), for messages. The first
    `prompt_messages` messages are a prompt, context only: no token of theirs is trained. `tools` are the
    definitions of the tools it may call (its record's `tools`), which a template renders for the model."""

    messages: tuple[dict[str, Any], ...]
    place: str
    prompt_messages: int = 0
    tools: tuple[dict[str, Any], ...] | None = None


def read_conversations(
    piece: Piece, policy: ReadPolicy, notes: ReadNotes, field: str = MESSAGES
) -> Iterator[Conversation]:
    """The conversations of a piece of a chat source, in file order, each from the JSONL field or Parquet
    column `field`; bad ones refused, and those not UTF-8 handled, as `policy` says (and noted).

    >>> import pathlib, tempfile
    >>> from meltemi.datastore.build.inputs.files import describe_source
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "chat.jsonl"
    >>> good = '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]}'
    >>> _ = path.write_text(good + '\\n{"messages": [{"role": "bot", "content": "?"}]}\\n')
    >>> notes, piece = ReadNotes(), describe_source(str(path)).pieces()[0]
    >>> [c.place.split(", ")[-1] for c in read_conversations(piece, ReadPolicy(skip_bad_lines=True), notes)]
    ['line 1']
    >>> notes.counts["refused_conversations"], notes.skipped_lines[0].partition("chat.jsonl, ")[2]
    (1, "line 2: message 1 has role 'bot', not one of system, user, assistant, tool")
    >>> list(read_conversations(piece, ReadPolicy(), ReadNotes()))
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.BadLineError: ...chat.jsonl, line 2: message 1 has role 'bot', not one of ...
    """
    kind = piece.source.kind
    if kind in TABLE_KINDS:
        yield from _table_conversations(piece, policy, notes, field)
    elif kind == "text":
        raise InputError(
            f"{piece.source.name}: a chat source must be JSON (.jsonl, .json), Parquet or Arrow (each may be "
            f"compressed: .jsonl.gz, .json.zst) with a {field!r} field of conversations (or a {PROMPT!r} and "
            f"a {COMPLETION!r}), not plain text"
        )
    elif kind == "json" and holds_json_array(piece.source):
        yield from _json_array_conversations(piece, policy, notes, field)
    else:
        yielded = False
        parse = _jsonl_parser(policy, notes, field)
        for conversation in read_jsonl(piece, policy, notes, parse, refused=REFUSED):
            yielded = True
            yield conversation
        if not yielded and piece.whole:
            notes.counts["empty_files"] += 1


def checked_messages(value: Any, field: str = "messages") -> tuple[dict[str, Any], ...]:
    """`value` as a conversation's messages, or a `BadLineError` saying what is wrong with it.

    >>> checked_messages([{"role": "user", "content": "Hi"}])
    ({'role': 'user', 'content': 'Hi'},)
    >>> checked_messages([{"role": "user", "content": "Hi"}, {"role": "assistant"}])
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.BadLineError: message 2 has no string 'content'

    An assistant's message that calls tools (OpenAI's and transformers' `tool_calls`: a list of
    `{"type": "function", "function": {"name": ..., "arguments": ...}}`) may have no content:

    >>> call = {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}
    >>> calling = {"role": "assistant", "content": None, "tool_calls": [call]}
    >>> [m["content"] for m in checked_messages([calling])]
    [None]
    """
    if not isinstance(value, list) or not value:
        what = "an empty list" if isinstance(value, list) else _kind(value)
        raise BadLineError(f"field {field!r} is {what}, not a non-empty list of messages (objects)")
    for number, message in enumerate(value, start=1):
        if not isinstance(message, dict):
            raise BadLineError(f"message {number} is {_kind(message)}, not an object")
        calls = tool_call_names(message, number)
        for key in ("role", "content"):
            if key == "content" and calls and message.get(key) is None:
                continue  # a tool call says it all
            if not isinstance(message.get(key), str):
                held = f" (it is {_kind(message[key])})" if message.get(key) is not None else ""
                raise BadLineError(f"message {number} has no string {key!r}{held}")
        if message["role"] not in ROLES:
            roles = ", ".join(ROLES)
            raise BadLineError(f"message {number} has role {message['role']!r}, not one of {roles}")
    return tuple(value)


def tool_call_names(message: dict[str, Any], number: int) -> list[str]:
    """The function names of a message's `tool_calls` (none when it has none); a `BadLineError` when they
    are not a list of calls, each naming its function.

    >>> tool_call_names({"role": "assistant", "tool_calls": [{"function": {"name": "add"}}]}, 2)
    ['add']
    >>> tool_call_names({"role": "assistant", "tool_calls": [{"function": {}}]}, 2)
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.BadLineError: message 2: tool call 1 names no function (function.name)
    """
    calls = message.get("tool_calls")
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise BadLineError(f"message {number}: 'tool_calls' is {_kind(calls)}, not a list of calls")
    names = []
    for index, call in enumerate(calls, start=1):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise BadLineError(f"message {number}: tool call {index} names no function (function.name)")
        names.append(name)
    return names


def prompt_and_completion(prompt: Any, completion: Any) -> tuple[tuple[dict[str, Any], ...], ...]:
    """The messages of a prompt and of its completion, each given as a list of messages or as a string (the
    prompt: one user message; the completion: one assistant message); a `BadLineError` saying what is
    wrong with either.

    >>> prompt, completion = prompt_and_completion("2 + 2?", [{"role": "assistant", "content": "4"}])
    >>> prompt, completion
    (({'role': 'user', 'content': '2 + 2?'},), ({'role': 'assistant', 'content': '4'},))
    >>> prompt_and_completion("2 + 2?", None)
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.BadLineError: field 'completion' is null, not a string or a list of messages
    """
    parts = []
    for value, field, role in ((prompt, PROMPT, "user"), (completion, COMPLETION, "assistant")):
        if not isinstance(value, str | list):
            raise BadLineError(f"field {field!r} is {_kind(value)}, not a string or a list of messages")
        parts.append(
            checked_messages([{"role": role, "content": value}] if isinstance(value, str) else value, field)
        )
    return tuple(parts)


def sharegpt_messages(value: Any, system: Any = None, field: str = SHAREGPT) -> Any:
    """ShareGPT's turns (`{"from": "human", "value": ...}`, as Axolotl and LLaMA-Factory read them) as
    messages, the record's `system` text first when the turns hold none; anything else is returned as it
    is, for `checked_messages` to judge.

    >>> sharegpt_messages([{"from": "human", "value": "2 + 2?"}, {"from": "gpt", "value": "4"}], "Be brief.")
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '2 + 2?'}, \
{'role': 'assistant', 'content': '4'}]
    """
    if not isinstance(value, list) or not value or not all(_is_turn(turn) for turn in value):
        return value
    messages = []
    for number, turn in enumerate(value, start=1):
        role = SHAREGPT_ROLES.get(turn["from"])
        if role is None:
            known = ", ".join(SHAREGPT_ROLES)
            raise BadLineError(f"{field}: turn {number} is from {turn['from']!r}, not one of {known}")
        if turn["from"] == "function_call":
            messages.append(
                {"role": role, "content": None, "tool_calls": _calls(turn["value"], field, number)}
            )
        else:
            messages.append({"role": role, "content": turn["value"]})
    if isinstance(system, str) and system and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system})
    return messages


def alpaca_messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Alpaca's `instruction`, optional `input` and `output` as messages, as LLaMA-Factory reads them: the
    record's `system` text first, then each earlier exchange of its `history` (`[query, response]` pairs),
    then the user's instruction and input joined by a newline, and the assistant's output; a `BadLineError`
    naming a field that is not what it should be.

    >>> alpaca_messages({"instruction": "Add the numbers.", "input": "2 + 2", "output": "4"})
    [{'role': 'user', 'content': 'Add the numbers.\\n2 + 2'}, {'role': 'assistant', 'content': '4'}]
    >>> alpaca_messages({"instruction": "Add.", "output": 4})
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.BadLineError: field 'output' is a number, not a string
    """
    for name in (INSTRUCTION, OUTPUT, INPUT, SYSTEM):
        value = record.get(name)
        if not isinstance(value, str) and (name in (INSTRUCTION, OUTPUT) or value is not None):
            raise BadLineError(f"field {name!r} is {_kind(value)}, not a string")
    history = record.get(HISTORY) or []
    pairs = isinstance(history, list) and all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(text, str) for text in pair)
        for pair in history
    )
    if not pairs:
        raise BadLineError(f"field {HISTORY!r} is not a list of [query, response] pairs of strings")
    messages = [{"role": "system", "content": record[SYSTEM]}] if record.get(SYSTEM) else []
    for query, response in history:
        messages += [{"role": "user", "content": query}, {"role": "assistant", "content": response}]
    query = "\n".join(text for text in (record[INSTRUCTION], record.get(INPUT)) if text)
    return [*messages, {"role": "user", "content": query}, {"role": "assistant", "content": record[OUTPUT]}]


def _calls(value: Any, field: str, number: int) -> list[dict[str, Any]]:
    """A `function_call` turn's value (JSON text of one call `{"name", "arguments"}`, or a list of them) as
    the `tool_calls` of a message, as transformers' templates read them.

    >>> _calls('{"name": "add", "arguments": {"a": 1}}', "conversations", 2)
    [{'type': 'function', 'function': {'name': 'add', 'arguments': {'a': 1}}}]
    """
    try:
        calls = json.loads(value) if isinstance(value, str) else None
    except json.JSONDecodeError:
        calls = None
    calls = [calls] if isinstance(calls, dict) else calls
    if not isinstance(calls, list) or not calls or not all(_is_call(call) for call in calls):
        raise BadLineError(
            f"{field}: turn {number} (function_call) is not the JSON text of a call "
            '({"name": ..., "arguments": ...}) or of a list of them'
        )
    return [{"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]


_NOR_OTHER_FORMS = (
    f"nor a {PROMPT!r} and a {COMPLETION!r}, nor ShareGPT's {SHAREGPT!r}, nor Alpaca's {INSTRUCTION!r} and "
    f"{OUTPUT!r}"
)


def _is_call(call: Any) -> bool:
    return isinstance(call, dict) and isinstance(call.get("name"), str) and "arguments" in call


def _is_turn(turn: Any) -> bool:
    """Whether `turn` is a ShareGPT turn: `from` and `value`, and no `role`."""
    return isinstance(turn, dict) and "from" in turn and "value" in turn and "role" not in turn


def _kind(value: Any) -> str:
    """What a JSON value is, in words: `a list`, `a string`, `null`, ..."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number"}
    return (
        "null"
        if value is None
        else names.get(type(value), "a number" if isinstance(value, float) else type(value).__name__)
    )


def _jsonl_parser(
    policy: ReadPolicy, notes: ReadNotes, field: str
) -> Callable[[str, Place], Conversation | None]:
    def parse(line: str, place: Place) -> Conversation | None:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadLineError(f"not valid JSON ({e.msg} at column {e.colno})") from None
        # only a JSON escape can make a lone surrogate (decoded UTF-8 holds none)
        return _record_conversation(record, place, policy, notes, field, escaped="\\u" in line)

    return parse


def _record_conversation(
    record: Any, place: Place, policy: ReadPolicy, notes: ReadNotes, field: str, escaped: bool
) -> Conversation | None:
    """The conversation in one JSON record (None: skipped as not text), or a `BadLineError` saying what is
    wrong with it (no place yet); `escaped` when its JSON held a `\\u` escape."""
    if not isinstance(record, dict):
        raise BadLineError(f"not a JSON object with a {field!r} field (it is {_kind(record)})")
    prompt_messages = 0
    if field in record:
        messages = checked_messages(sharegpt_messages(record[field], record.get(SYSTEM), field), field)
    elif PROMPT in record and COMPLETION in record:
        prompt, completion = prompt_and_completion(record[PROMPT], record[COMPLETION])
        messages, prompt_messages = prompt + completion, len(prompt)
    elif SHAREGPT in record:
        messages = checked_messages(
            sharegpt_messages(record[SHAREGPT], record.get(SYSTEM), SHAREGPT), SHAREGPT
        )
    elif INSTRUCTION in record and OUTPUT in record:
        messages = checked_messages(alpaca_messages(record), INSTRUCTION)
    elif (alias := messages_alias(record, field)) is not None:
        messages = checked_messages(sharegpt_messages(record[alias], record.get(SYSTEM), alias), alias)
    else:
        raise _no_messages(field, record)
    if escaped:
        messages = _without_lone_surrogates(messages, place, policy, notes)
    tools = checked_tools(record.get(TOOLS))
    return None if messages is None else Conversation(messages, str(place), prompt_messages, tools)


def messages_alias(record: dict[str, Any], field: str = MESSAGES) -> str | None:
    """The field of `MESSAGE_FIELDS` that holds `record`'s messages when it has no `field` (a non-empty list
    of objects: messages, or ShareGPT's turns), if `field` is the default one; else None.

    >>> messages_alias({"id": 7, "dialog": [{"role": "user", "content": "Hi"}]})
    'dialog'
    >>> messages_alias({"text": "Hi there"}), messages_alias({"dialog": [{"role": "user"}]}, "chats")
    (None, None)
    """
    if field != MESSAGES:
        return None
    return next((name for name in MESSAGE_FIELDS if _objects(record.get(name))), None)


def _objects(value: Any) -> bool:
    """Whether `value` is a non-empty list of objects (a conversation's messages or turns)."""
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _no_messages(field: str, record: dict[str, Any]) -> BadLineError:
    """What a record without a conversation lacks, its fields, and how to name the one holding its messages
    (a remedy setting `text_field`, which a chat build reads as the messages' field): a field holding a list
    of objects is offered as the likely one.

    >>> print(_no_messages("messages", {"id": 1, "turn_list": [{"who": "me"}]}))
    no 'messages' field, nor a 'prompt' and a 'completion', nor ShareGPT's 'conversations', nor Alpaca's \
'instruction' and 'output', nor messages under conversation, dialog, dialogue, chat, turns or text (its \
fields: id, turn_list); field 'turn_list' holds a list of objects: if they are the messages, pass \
--text-field turn_list
    """
    aliases = f", nor messages under {', '.join(MESSAGE_FIELDS[:-1])} or {MESSAGE_FIELDS[-1]}"
    said = f"no {field!r} field, {_NOR_OTHER_FORMS}{aliases * (field == MESSAGES)}"
    said += f" (its fields: {', '.join(map(str, record)) or 'none'})"
    likely = next((name for name, value in record.items() if _objects(value) and name != TOOLS), None)
    return BadLineError(said, remedies=(_messages_remedy("field", likely, "a list of objects"),))


def _messages_remedy(what: str, likely: str | None, holds: str) -> Remedy:
    """How to name the field (or column) of the messages: `likely`'s, when one `holds` what they would."""
    if likely is None:
        return Remedy(
            f"; pass {{}} to name the {what} that holds the messages", (Way({"text_field": "FIELD"}),)
        )
    return Remedy(
        f"; {what} {likely!r} holds {holds}: if they are the messages, pass {{}}",
        (Way({"text_field": likely}),),
    )


def checked_tools(value: Any) -> tuple[dict[str, Any], ...] | None:
    """A record's `tools` as tool definitions (objects, such as `{"type": "function", "function": {...}}`):
    a list of them, or the JSON text of one (as LLaMA-Factory and many Parquet exports keep them); None
    when there are none; a `BadLineError` otherwise.

    >>> checked_tools('[{"type": "function", "function": {"name": "add"}}]')
    ({'type': 'function', 'function': {'name': 'add'}},)
    >>> checked_tools("") is None, checked_tools([]) is None
    (True, True)
    """
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except json.JSONDecodeError as e:
            raise BadLineError(f"{TOOLS!r} is text that is not JSON ({e.msg} at column {e.colno})") from None
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(tool, dict) for tool in value):
        raise BadLineError(f"{TOOLS!r} is {_kind(value)}, not a list of tool definitions (objects)")
    return tuple(value)


def _json_array_conversations(
    piece: Piece, policy: ReadPolicy, notes: ReadNotes, field: str
) -> Iterator[Conversation]:
    """The conversation of each record of a `.json` file holding one array (`sources.read_json_array`)."""
    yielded = False

    def parse(record: Any, place: Place) -> Conversation | None:
        return _record_conversation(record, place, policy, notes, field, escaped=True)

    for conversation in read_json_array(piece, policy, notes, parse, refused=REFUSED):
        yielded = True
        yield conversation
    if not yielded:
        notes.counts["empty_files"] += 1


def _without_lone_surrogates(
    messages: tuple[dict[str, Any], ...], place: Place, policy: ReadPolicy, notes: ReadNotes
) -> tuple[dict[str, Any], ...] | None:
    """JSON may escape lone surrogates, which are not text: a conversation holding one anywhere is an
    error, skipped or repaired (counted once), as a document's text is."""
    found = next((s for s in _strings(messages) if LONE_SURROGATE.search(s)), None)
    if found is None:
        return messages
    if without_surrogates(found, place, policy, notes) is None:
        return None
    return _mapped(messages, lambda s: LONE_SURROGATE.sub("\ufffd", s))


def _strings(value: Any) -> Iterator[Any]:
    """Every string (or bytes) inside nested lists, tuples and dicts (keys included)."""
    if isinstance(value, str | bytes):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _mapped(value: Any, change: Callable[[Any], Any]) -> Any:
    """`value` with `change` applied to every string (or bytes) inside it; lists, tuples and dicts kept."""
    if isinstance(value, str | bytes):
        return change(value)
    if isinstance(value, dict):
        return {_mapped(key, change): _mapped(item, change) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_mapped(item, change) for item in value)
    return value


def _table_conversations(
    piece: Piece, policy: ReadPolicy, notes: ReadNotes, field: str
) -> Iterator[Conversation]:
    """Each row's conversation of a Parquet or Arrow file. Arrow does not check that strings hold UTF-8, so
    every string in the columns is read as bytes and decoded here, under the policy, as a JSONL line is."""
    source = piece.source
    with open_table(source) as table:
        columns = _conversation_columns(source, table.schema, field, policy)
        yielded, row = False, 0

        def parse(record: Any, place: Place) -> Conversation | None:
            return _record_conversation(record, place, policy, notes, field, escaped=False)

        for batch in table.batches(columns):
            values = [c.cast(_as_bytes(c.type)).to_pylist() for c in batch.columns]
            for cells in zip(*values, strict=True):
                row += 1
                place = Place(source, row=row)
                record = _decoded(dict(zip(columns, cells, strict=True)), place, policy, notes)
                if record is None:  # not UTF-8, and skipped
                    continue
                conversation = parsed_or_refused(parse, record, place, policy, notes, REFUSED)
                if conversation is not None:
                    yielded = True
                    yield conversation
        if not yielded:
            notes.counts["empty_files"] += 1


def _conversation_columns(source, schema, field: str, policy: ReadPolicy) -> list[str]:
    """The Parquet or Arrow columns a chat source's conversations are read from: `field`, or else a prompt
    column and a completion column, or else ShareGPT's turns (each with a `system` column when there is
    one), or else Alpaca's, or else a column of `MESSAGE_FIELDS` holding lists of structs (when `field` is
    the default); an `InputError` naming the file when none is there, or a column's type cannot hold what it
    should."""
    import pyarrow as pa

    names = schema.names
    tools = [TOOLS] if TOOLS in names and field != TOOLS else []
    structs = [name for name in names if _struct_lists(schema.field(name).type)]
    alias = next((name for name in MESSAGE_FIELDS if name in structs), None) if field == MESSAGES else None
    turns = None
    if field in names or (SHAREGPT in names and not (PROMPT in names and COMPLETION in names)):
        turns = field if field in names else SHAREGPT
    elif PROMPT in names and COMPLETION in names:
        columns, texts = [PROMPT, COMPLETION, *tools], [PROMPT, COMPLETION]
    elif INSTRUCTION in names and OUTPUT in names:
        texts = [INSTRUCTION, *(name for name in (INPUT, SYSTEM) if name in names), OUTPUT]
        columns = [*texts, *([HISTORY] if HISTORY in names else []), *tools]
    elif alias is not None:
        turns = alias
    else:
        aliases = f", nor messages in {', '.join(MESSAGE_FIELDS[:-1])} or {MESSAGE_FIELDS[-1]}"
        likely = next((name for name in structs if name != TOOLS), None)
        raise InputError(
            f"{source.name}: no column {field!r}, {_NOR_OTHER_FORMS}{aliases * (field == MESSAGES)} "
            f"(columns: {', '.join(names)})",
            remedies=(_messages_remedy("column", likely, "lists of structs"),),
        )
    if turns is not None:
        columns, texts = [turns, *([SYSTEM] if SYSTEM in names and SYSTEM != turns else []), *tools], [SYSTEM]
    for name in columns:
        kind = schema.field(name).type
        lists = (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_struct(
            kind.value_type
        )
        strings = name in (*texts, TOOLS) and (pa.types.is_string(kind) or pa.types.is_large_string(kind))
        if name == TOOLS and not (lists or strings):
            raise InputError(
                f"{source.name}: column {name!r} holds {kind}, not tool definitions (a list of structs, or "
                "JSON text)"
            )
        if name == SYSTEM and name != columns[0] and not strings:
            raise InputError(f"{source.name}: column {name!r} holds {kind}, not text (a system prompt)")
        if columns[0] == INSTRUCTION and name in texts and not strings:  # Alpaca's columns are text
            raise InputError(f"{source.name}: column {name!r} holds {kind}, not text")
        if name == HISTORY:
            if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
                raise InputError(f"{source.name}: column {name!r} holds {kind}, not [query, response] pairs")
            continue
        if not (lists or strings):
            held = "text or a list of messages" if name in (PROMPT, COMPLETION) else "conversations"
            raise InputError(
                f"{source.name}: column {name!r} holds {kind}, not {held} (lists of structs with a role and "
                "a content)"
            )
    return columns


def _struct_lists(kind) -> bool:
    """Whether an Arrow type is a list of structs (a column of conversations' messages or turns)."""
    import pyarrow as pa

    return (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_struct(kind.value_type)


def _as_bytes(kind):
    """An Arrow type with every string inside it (struct fields, list items) read as bytes instead."""
    import pyarrow as pa

    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pa.large_binary()
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        make = pa.list_ if pa.types.is_list(kind) else pa.large_list
        item = kind.value_field
        return make(pa.field(item.name, _as_bytes(item.type), item.nullable))
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, _as_bytes(f.type), f.nullable) for f in kind])
    return kind


def _decoded(value: Any, place: Place, policy: ReadPolicy, notes: ReadNotes) -> Any:
    """A row's value with its bytes decoded as UTF-8; one that is not: an error, None (skipped) or repaired
    as `policy` says, counted once for the row."""
    bad = next((b for b in _strings(value) if isinstance(b, bytes) and not _is_utf8(b)), None)
    if bad is not None and decode_document(bad, place, policy, notes) is None:
        return None
    errors = "strict" if bad is None else "replace"
    return _mapped(value, lambda b: b.decode("utf-8", errors) if isinstance(b, bytes) else b)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
