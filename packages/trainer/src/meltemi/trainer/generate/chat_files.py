"""A chat's files, local or in a bucket: the tool definitions shown to the model (``--tools``) and a
conversation as JSON, which ``--conversation`` goes on with and the prompt loop's ``/save`` writes. Each
mistake is one line naming the file; a file this chat did not read or write is never replaced.

>>> import pathlib, tempfile
>>> path = pathlib.Path(tempfile.mkdtemp()) / "chat.json"
>>> said = [{"role": "user", "content": "Add 2 and 3."}, {"role": "assistant", "content": "5"}]
>>> write_conversation(path, said)
>>> read_conversation(path).messages == tuple(said)
True
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from meltemi.trainer.generate.sampling import GenerationError

if TYPE_CHECKING:
    from meltemi.datastore.chat.conversations import Conversation

Message = dict[str, Any]  # {"role": ..., "content": ...}, and an assistant's "tool_calls" when it calls tools
Tools = tuple[dict[str, Any], ...]  # tool definitions, such as {"type": "function", "function": {...}}


def read_tools(location: str | os.PathLike) -> Tools:
    """The tool definitions in the JSON file ``location`` (local or in a bucket): a list of them, as
    ``apply_chat_template``'s ``tools`` takes them; a ``GenerationError`` naming the file otherwise.

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "tools.json"
    >>> _ = path.write_text('[{"type": "function", "function": {"name": "add"}}]')
    >>> read_tools(path)
    ({'type': 'function', 'function': {'name': 'add'}},)
    >>> _ = path.write_text('{"name": "add"}')
    >>> read_tools(path)
    Traceback (most recent call last):
    ...
    meltemi.trainer.generate.sampling.GenerationError: --tools ...tools.json: 'tools' is an object, not a...
    """
    from meltemi.datastore.chat.conversations import checked_tools
    from meltemi.datastore.errors import BadLineError
    from meltemi.datastore.storage import read_object

    data = read_object(location)
    if data is None:
        raise GenerationError(f"--tools {location}: no such file")
    try:
        tools = checked_tools(json.loads(data))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GenerationError(f"--tools {location}: not JSON ({e})") from None
    except BadLineError as e:
        raise GenerationError(f"--tools {location}: {e}") from None
    if tools is None:
        raise GenerationError(f"--tools {location}: holds no tool definitions (an empty list)")
    return tools


def read_conversation(location: str | os.PathLike) -> Conversation:
    """The conversation in the JSON file ``location`` (local or in a bucket), to go on with: a list of
    messages as ``apply_chat_template`` takes them (tool calls and tool results included), or one record of
    a chat data set (``{"messages": [...], "tools": [...]}``); a ``GenerationError`` naming the file
    otherwise.

    >>> import json, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "chat.json"
    >>> _ = path.write_text(json.dumps([{"role": "user", "content": "Add 2 and 3."}]))
    >>> read_conversation(path).messages
    ({'role': 'user', 'content': 'Add 2 and 3.'},)
    >>> _ = path.write_text(json.dumps([{"role": "bot", "content": "?"}]))
    >>> read_conversation(path)
    Traceback (most recent call last):
    ...
    meltemi.trainer.generate.sampling.GenerationError: --conversation ...chat.json: message 1 has role...
    """
    from meltemi.datastore.chat.conversations import Conversation, checked_messages, checked_tools
    from meltemi.datastore.errors import BadLineError
    from meltemi.datastore.storage import read_object

    data = read_object(location)
    if data is None:
        raise GenerationError(f"--conversation {location}: no such file")
    try:
        value = json.loads(data)
        record = value if isinstance(value, dict) else {"messages": value}
        messages, tools = checked_messages(record.get("messages")), checked_tools(record.get("tools"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GenerationError(f"--conversation {location}: not JSON ({e})") from None
    except BadLineError as e:
        raise GenerationError(f"--conversation {location}: {e}") from None
    return Conversation(messages, str(location), tools=tools)


def write_conversation(
    location: str | os.PathLike,
    messages: list[Message] | tuple[Message, ...],
    tools: Tools | None = None,
    *,
    replace: bool = False,
    earlier: bool = False,
) -> None:
    """Write ``messages`` (and the ``tools`` shown with them) to the JSON file ``location``, local or in a
    bucket, as ``read_conversation`` reads it: a list of messages, or a record with ``messages`` and
    ``tools``. A file already there is kept and this is a ``GenerationError`` naming it and how to replace
    it (``/save!``), unless ``replace`` (the file this conversation was read from or saved to, or
    ``/save!``); ``earlier`` says the file holds the chat's conversation before ``/clear``. So is a folder
    or directory named as the file, and an empty conversation (``read_conversation`` would refuse it).

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "chat.json"
    >>> said = [{"role": "user", "content": "Hi"}]
    >>> write_conversation(path, said)
    >>> write_conversation(path, said)
    Traceback (most recent call last):
    ...
    meltemi.trainer.generate.sampling.GenerationError: /save ...chat.json: already exists, and this chat...
    """
    from meltemi.datastore.errors import NotAFileError
    from meltemi.datastore.storage import file_to_write

    shown = os.fspath(location)
    if not messages:
        raise GenerationError(f"/save {shown}: nothing has been said yet, so there is nothing to save")
    try:
        folder, name = file_to_write(location, "chat.json")  # the seam's error for a bad URL or bucket
    except NotAFileError as e:
        raise GenerationError(f"/save {e}") from None
    if not replace and folder.exists(name):
        held = (
            "holds the conversation before /clear"
            if earlier
            else "already exists, and this chat neither read nor saved it"
        )
        raise GenerationError(
            f"/save {shown}: {held} (what it holds is kept); /save another name, or /save! {shown} to "
            "replace it"
        )
    record: Any = list(messages) if tools is None else {"messages": list(messages), "tools": list(tools)}
    folder.write_text(name, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
