"""Configs in and out: YAML presets loaded safely, dotted command-line overrides, one-line errors, help.

>>> config = load_config(None, ["--trainer.num_train_steps", "7", "--model.remat=none"])
>>> config.trainer.num_train_steps, config.model.remat
(7, 'none')
>>> load_config(None, ["--trainer.num_step", "7"])
Traceback (most recent call last):
...
meltemi.trainer.errors.ConfigError: --trainer.num_step: not a config field (did you mean ...num_train_steps?)
"""

from __future__ import annotations

import difflib
import os
import types
import typing
from collections.abc import Sequence
from typing import Any

import pydantic
import yaml
from pydantic import BaseModel

from meltemi.datastore.errors import StorageError
from meltemi.datastore.storage import Location, read_object
from meltemi.trainer.config import RENAMED, RunConfig
from meltemi.trainer.errors import ConfigError
from meltemi.trainer.flag_guess import Hint, Takes, guess

OVERRIDES = Takes(fields=True)  # what a word of the command line, --section.field, is guessed against
KEYS = Takes(fields=True, keys=True)  # and a config file's section.key, answered in keys


def load_config(path: str | os.PathLike | None, overrides: Sequence[str] = ()) -> RunConfig:
    """The config in the YAML file at ``path`` (None: all defaults) with ``overrides`` applied.

    ``overrides`` are command-line words: ``--a.b VALUE`` or ``--a.b=VALUE``; values are read as YAML
    (``100``, ``null``, ``[1, 2]``, ``bfloat16``).
    """
    parsed = parse_overrides(overrides)
    for dotted, _ in parsed:  # a mistyped flag is named as typed, before the file is read
        check_field_name(dotted)
    raw = read_yaml(path) if path is not None else {}
    _data_named_once(raw, [dotted for dotted, _ in parsed])
    for dotted, value in parsed:
        set_dotted(raw, dotted, value)
    return validate(raw, where=os.fspath(path) if path is not None else "the defaults")


DATA_CHOICES = ("stores", "corpus", "sources")
"""The ways to name the training data (``resolve_data`` takes the first one set)."""


def _data_named_once(raw: dict[str, Any], dotted: Sequence[str]) -> None:
    """Drop from the file's ``raw`` config the ways of naming the data that the overrides replace: data the
    command line names is what trains, whichever way the preset named its own (``--data.sources`` on a preset
    with ``corpus: stdlib`` trains on those sources, not on the standard library).

    >>> raw = {"data": {"corpus": "stdlib", "seq_len": 512}}
    >>> _data_named_once(raw, ["data.sources", "trainer.seed"]); raw
    {'data': {'seq_len': 512}}
    """
    named = {key.split(".")[1] for key in dotted if key.count(".") >= 1 and key.startswith("data.")}
    data = raw.get("data")
    if not (named & set(DATA_CHOICES)) or not isinstance(data, dict):
        return
    for choice in DATA_CHOICES:
        if choice not in named:
            data.pop(choice, None)


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """The mapping in a YAML file (a path, or a URL read through the storage seam); a missing, unreadable or
    non-mapping file is a ``ConfigError``.

    >>> from meltemi.datastore.storage import Directory
    >>> Directory("memory://doc/configs").write_text("run.yaml", "trainer: {seed: 3}")
    >>> read_yaml("memory://doc/configs/run.yaml")
    {'trainer': {'seed': 3}}
    """
    try:
        data = read_object(path)
        if data is None:
            local = Location.parse(path).local_path
            missing = "is a directory" if local is not None and local.is_dir() else "does not exist"
            raise ConfigError(f"config file {os.fspath(path)!r} {missing}")
        text = data.decode("utf-8")
    except (StorageError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {os.fspath(path)!r} cannot be read: {e}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {os.fspath(path)!r} is not valid YAML: {_one_line(e)}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {os.fspath(path)!r} must hold a mapping, got {type(raw).__name__}")
    return raw


def parse_overrides(words: Sequence[str]) -> list[tuple[str, Any]]:
    """``["--a.b", "1", "--c=x"]`` -> ``[("a.b", 1), ("c", "x")]``; several words before the next
    ``--`` make a list (``--data.stores a b``).

    >>> parse_overrides(["--trainer.seed", "3", "--data.seq_len=64", "--data.stores", "a", "b"])
    [('trainer.seed', 3), ('data.seq_len', 64), ('data.stores', ['a', 'b'])]
    """
    out, i = [], 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--") or len(word) == 2:
            raise ConfigError(f"expected an override like --trainer.num_train_steps 100, got {word!r}")
        if "=" in word:
            key, text = word[2:].split("=", 1)
            texts = [text]
            i += 1
        else:
            key, end = word[2:], i + 1
            while end < len(words) and not words[end].startswith("--"):
                end += 1
            texts = list(words[i + 1 : end])
            if not texts:
                raise ConfigError(f"override {word} has no value")
            i = end
        values = [_read_value(text) for text in texts]
        out.append((key.replace("-", "_"), values[0] if len(values) == 1 else values))
    return out


def _read_value(text: str) -> Any:
    try:
        return yaml.safe_load(text) if text.strip() else text
    except yaml.YAMLError:
        return text


def set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``raw[a][b][c] = value`` for ``dotted = "a.b.c"``, making the intermediate mappings."""
    parts = dotted.split(".")
    node = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: depth + 1])
            raise ConfigError(f"{dotted}: {where} is a value ({child!r}), not a section with fields")
        node = child
    node[parts[-1]] = value


def validate(raw: dict[str, Any], where: str = "the config", *, recorded: bool = False) -> RunConfig:
    """``RunConfig`` from a raw mapping; the first problem becomes a one-line ``ConfigError``. A config
    ``recorded`` in a run (a checkpoint's manifest, which the user did not type) has the message start with
    ``where``, so it says which record holds the value.

    >>> validate({"trainer": {"seed": "x"}}, "run/step-2/manifest.json", recorded=True)
    Traceback (most recent call last):
    meltemi.trainer.errors.ConfigError: run/step-2/manifest.json: trainer.seed: Input should be a valid ...
    """
    try:
        return RunConfig.model_validate(raw)
    except pydantic.ValidationError as e:
        message = _describe(e.errors()[0], where)
        raise ConfigError(f"{where}: {message}" if recorded else message) from None


def check_field_name(dotted: str) -> None:
    """Refuse an override ``--dotted`` that names no config field, with the nearest names that do (a key of a
    mapping field, such as a source's name in ``data.sources.<name>.store``, is the user's to choose).

    >>> check_field_name("trainer.mesh.data")
    >>> check_field_name("modle.hidden_dim")
    Traceback (most recent call last):
    meltemi.trainer.errors.ConfigError: --modle.hidden_dim: not a config field: there is no section modle \
(did you mean --model.hidden_dim?)
    """
    if dotted in RENAMED:
        now, why = RENAMED[dotted]
        raise ConfigError(f"--{dotted}: now --{now} ({why})")
    parts = dotted.split(".")
    unknown = _first_unknown(parts)
    if unknown is None:
        return
    near = [f"--{name}" for name in _suggestions(parts, *unknown)]
    if unknown[0] < len(parts) - 1:  # a section: another tool's name for a field is no answer there
        what, hint = f": there is no section {'.'.join(parts[: unknown[0] + 1])}", Hint(near=tuple(near))
    else:
        what, hint = "", guess(f"--{dotted}", OVERRIDES, near=near)
    raise ConfigError(f"--{dotted}: not a config field{what}{hint.said(otherwise='; --help lists them')}")


def _first_unknown(parts: Sequence[str]) -> tuple[int, list[str]] | None:
    """Where the dotted name ``parts`` leaves the config's fields, and the names valid there; None when it
    names a field (or a value inside one, whose validation speaks for it)."""
    model: Any = RunConfig
    depth = 0
    while depth < len(parts):
        fields = getattr(model, "model_fields", None)
        if fields is None:
            return None
        if parts[depth] not in fields:
            return depth, list(fields)
        annotation = fields[parts[depth]].annotation
        depth += 2 if _is_collection(annotation) else 1  # a mapping's key or a list's index is no field
        model = _section_type(annotation)
    return None


def _suggestions(parts: Sequence[str], depth: int, names: Sequence[str]) -> list[str]:
    """``parts`` with its unknown name at ``depth`` replaced by the valid ``names`` like it: spelled nearly
    so (those about as near as the nearest: ``storee`` is ``store``, not also ``eval_store``), or holding it
    as the start of a word (``steps``: ``num_train_steps``), at most three.

    >>> _suggestions(["storee"], 0, ["store", "eval_store", "weight"])
    ['store']
    """
    name = parts[depth]
    near = difflib.get_close_matches(name, list(names), n=3, cutoff=0.6)
    best = max((difflib.SequenceMatcher(None, name, n).ratio() for n in near), default=0.0)
    near = [n for n in near if difflib.SequenceMatcher(None, name, n).ratio() >= best - 0.15]
    if len(name) >= 3:
        near += [n for n in names if n not in near and any(w.startswith(name) for w in n.split("_"))]
    return [".".join([*parts[:depth], n, *parts[depth + 1 :]]) for n in near[:3]]


def _is_collection(annotation: Any) -> bool:
    """Whether a field's annotation is a mapping or a list (``dict[str, X]``, ``list[X]``, possibly
    ``| None``), whose entries are named by a key or an index."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(typing.get_origin(arg) in (dict, list) for arg in typing.get_args(annotation))
    return origin in (dict, list)


def _describe(error: dict, where: str) -> str:
    loc = [str(part) for part in error["loc"]]
    field = ".".join(loc)
    if error["type"] == "extra_forbidden":
        unknown = _first_unknown(loc)
        near = _suggestions(loc, *unknown) if unknown is not None else []
        return f"{field}: unknown key in {where}{guess(field, KEYS, near=near).said()}"
    message = error["msg"].removeprefix("Value error, ")
    if not field:
        return message
    given = error.get("input")
    shown = "" if isinstance(given, dict) or given is None else f" (got {given!r})"
    return f"{field}: {message}{shown}"


def _section_type(annotation: Any) -> Any:
    """The pydantic model inside an annotation such as ``WandbConfig | None``, else the annotation."""
    for arg in typing.get_args(annotation) or (annotation,):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def dump_config(config: RunConfig) -> str:
    """The config as YAML; ``validate(yaml.safe_load(dump_config(c))) == c``.

    >>> c = load_config(None, ["--trainer.seed", "5"])
    >>> validate(yaml.safe_load(dump_config(c))) == c
    True
    """
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def describe_fields(
    model: type[BaseModel] = RunConfig, prefix: str = "", values: Any = None
) -> list[tuple[str, str, str, str]]:
    """``(dotted name, type, value, description)`` for every field, sections expanded; the value is the
    field's in ``values`` (a config's ``model_dump(mode="json")``: what a preset sets) or its default.

    >>> [row[:3] for row in describe_fields() if row[0] == "trainer.mesh.data"]
    [('trainer.mesh.data', 'int', '-1')]
    >>> preset = load_config(None, ["--trainer.mesh.data", "4"]).model_dump(mode="json")
    >>> [row[2] for row in describe_fields(values=preset) if row[0] == "trainer.mesh.data"]
    ['4']
    """
    rows = []
    for name, field in model.model_fields.items():
        dotted = f"{prefix}{name}"
        given = values.get(name) if isinstance(values, dict) else None
        shown = _default(field) if not isinstance(values, dict) or name not in values else _yaml(given)
        section = _section_type(field.annotation)
        if isinstance(section, type) and issubclass(section, BaseModel):
            if field.default is None:
                rows.append((dotted, f"{section.__name__} | null", shown, field.description or ""))
            container = typing.get_origin(field.annotation)
            inner = {dict: f"{dotted}.<name>.", list: f"{dotted}[i]."}.get(container, f"{dotted}.")
            if container is not None and container is not types.UnionType:
                rows.append((dotted, _type_name(field.annotation), shown, field.description or ""))
                given = None  # a mapping's or list's entries are its own: their fields show defaults
            rows.extend(describe_fields(section, inner, given if isinstance(given, dict) else None))
            continue
        rows.append((dotted, _type_name(field.annotation), shown, field.description or ""))
    return rows


def _yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...")


def _default(field: pydantic.fields.FieldInfo) -> str:
    if field.is_required():
        return "(required)"
    return _yaml(
        pydantic.TypeAdapter(Any).dump_python(field.get_default(call_default_factory=True), mode="json")
    )


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if typing.get_origin(annotation) in (dict, list):
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{typing.get_origin(annotation).__name__}[{args}]"
    if typing.get_origin(annotation) is tuple:
        return "[" + ", ".join(_type_name(a) for a in typing.get_args(annotation)) + "]"
    if typing.get_origin(annotation) is typing.Literal:
        return "|".join(str(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))
