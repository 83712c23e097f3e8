"""Where a run's tokens come from, made concrete before the run starts: ``data.stores`` (token stores with
equal weights), ``data.corpus`` (a text, JSONL, Parquet or Arrow file or directory, built into a store on
first use) or ``data.sources`` (named stores, or corpora built into stores on first use, text or chat, with
weights), the sets evaluated beside them and never trained on (``data.eval_sets``: stores, or corpora
built as a source's are), and ``data.tokenizer``. The word ``stdlib`` in ``data.corpus`` or
``data.tokenizer`` stands for the running Python's standard library (its source files, and a byte-level
BPE of ``model.vocab_size`` tokens trained on them), which every machine has. A run with chat sources
renders them with ``data.chat.template``, whose special tokens the tokenizer gets when it lacks them
(``data.chat``), the model's vocabulary growing to match.

Built stores and the standard library's tokenizer are cached under ``data.cache_dir``; the config that comes
out names them by path in ``data.sources`` and ``data.tokenizer``, so it is what the run directory records.

>>> from meltemi.trainer.config import RunConfig
>>> config = RunConfig(data={"stores": ["gs://bucket/stores/web", "gs://bucket/stores/code"]})
>>> sorted(resolve_data(config).data.sources)
['code', 'web']
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from meltemi.datastore.hub_cache import local_or_cached, not_cached
from meltemi.datastore.storage import local_path_of
from meltemi.trainer.config import ModelConfig, RunConfig, StoreOrCorpus, eval_set_clash
from meltemi.trainer.data.build_words import in_command_words
from meltemi.trainer.data.chat import chat_recipe, chat_tokenizer, concrete_template
from meltemi.trainer.data.run_tokenizer import file_sha256
from meltemi.trainer.errors import ConfigError

if TYPE_CHECKING:
    from meltemi.datastore import BuildReport
    from meltemi.datastore.chat.recipe import ChatRecipe

STDLIB = "stdlib"
STDLIB_PARTS = "stdlib:"  # some of its files: stdlib:email/*,json/* (their paths under its root)
STDLIB_CHAT = (
    "stdlib-chat"  # a chat corpus: questions about the standard library's functions (datastore.chat.stdlib)
)

# How a user of the trainer's command line sets the corpus build's options: the words of the datastore's
# remedies, so that a hint never names a flag the command lacks.
CORPUS_FLAGS = {
    "text_field": "--data.text_field {}",
    "skip_bad_lines": "--data.skip_bad_lines {}",
    "invalid_utf8": "--data.invalid_utf8 {}",
    "overwrite": "--data.rebuild_corpus true",
}
BUILD_A_STORE = (  # what to do about a store that is not there: {path} is where it was looked for
    "build one from your files (uv run python -m meltemi.datastore build --input FILES --tokenizer "
    "TOKENIZER_JSON --out {path}), or name files or a data set to build one from on first use "
    "(--data.corpus PATH)"
)
SOURCE_FLAGS = CORPUS_FLAGS | {  # and a chat corpus's options
    "loss_on": "--data.chat.loss_on {}",
    "overlong": "--data.chat.overlong {}",
    "chat_template": "--data.chat.template {}",
    "end_of_turn": "--data.chat.end_of_turn {}",
}
MESSAGES_FLAG = "--data.chat.messages_field {}"  # a chat build's text_field: the field of the messages


def resolve_data(
    config: RunConfig, *, say: Callable[[str], object] = lambda line: print(line, file=sys.stderr)
) -> RunConfig:
    """``config`` with its data named by concrete paths: ``data.stores`` or ``data.corpus`` (built on first
    use) in ``data.sources``, each eval set's corpus (built on first use) as its store in ``data.eval_sets``,
    the standard library's tokenizer (trained on first use) in ``data.tokenizer``.
    ``data.stores`` wins over ``data.corpus``, which wins over ``data.sources``; ``say`` tells the user what
    is being built."""
    data = config.data
    corpora = any(each.corpus is not None for each in [*data.sources.values(), *data.eval_sets.values()])
    if not (data.stores or data.corpus is not None or data.tokenizer == STDLIB or corpora):
        return config  # concrete already: data.sources (checked when the run opens them)
    recipe = chat_recipe(config) if _holds_chat(config) else None  # data.chat, resolved once
    refuse_missing_inputs(config)  # before a tokenizer is trained or a store built for the others
    tokenizer, model = tokenizer_for_stores(config, say, recipe)
    if data.stores:
        sources = {name: {"store": store} for name, store in _store_names(data.stores).items()}
    elif data.corpus is not None:
        if tokenizer is None:
            raise ConfigError(
                "--data.corpus needs a tokenizer: pass --data.tokenizer TOKENIZER_JSON (or stdlib)"
            )
        name, stores = build_corpus(config, tokenizer, say)
        sources = {name: stores}
    else:
        sources = {
            name: build_source(config, name, source, tokenizer, say, recipe=recipe)
            | {"weight": source.weight}
            if source.corpus is not None
            else source.model_dump(exclude_defaults=True)
            for name, source in data.sources.items()
        }
    if (clash := eval_set_clash(sources, data.eval_sets)) is not None:
        raise ConfigError(clash)
    eval_sets = {  # built as a source is, read whole: a data set's test split is not built for them
        name: build_source(config, name, each, tokenizer, say, section="eval_sets", recipe=recipe)
        | {"tags": each.tags}
        if each.corpus is not None
        else each.model_dump(exclude_defaults=True)
        for name, each in data.eval_sets.items()
    }
    chat = data.chat.model_dump() | {"template": concrete_template(data.chat.template)}
    resolved = data.model_dump() | {
        "chat": chat,
        "tokenizer": tokenizer,
        "sources": sources,
        "eval_sets": eval_sets,
        "stores": [],
        "corpus": None,
        "rebuild_corpus": False,
    }
    return RunConfig.model_validate(config.model_dump() | {"data": resolved, "model": model.model_dump()})


def tokenizer_for_stores(
    config: RunConfig, say: Callable[[str], object], recipe: ChatRecipe | None = None
) -> tuple[str | None, ModelConfig]:
    """The tokenizer the run's stores are built with (``data.tokenizer``; ``stdlib``'s trained on first use),
    given the chat template's tokens when a source holds chat (``recipe``: ``data.chat`` resolved, else
    resolved here), and the model config whose vocabulary fits it; ``say`` tells the user what was trained
    or added.

    >>> from meltemi.trainer.config import RunConfig
    >>> tokenizer_for_stores(RunConfig(data={"tokenizer": "gs://b/tokenizer.json"}), print)[0]
    'gs://b/tokenizer.json'
    """
    data, model = config.data, config.model
    tokenizer = data.tokenizer
    if tokenizer == STDLIB:
        tokenizer = stdlib_tokenizer(config, say)
    elif (missing := _missing_tokenizer(tokenizer)) is not None:
        raise missing
    if _holds_chat(config):
        if tokenizer is None:
            raise ConfigError(
                "chat sources need a tokenizer: pass --data.tokenizer TOKENIZER_JSON (or stdlib)"
            )
        extended = chat_tokenizer(tokenizer, recipe or chat_recipe(config), data.cache_dir)
        if extended.added:
            say(
                f"the chat template's tokens {', '.join(extended.added)} were added to the tokenizer "
                f"{tokenizer} ({extended.path}): the model's vocabulary grows to {extended.vocab_size:,}"
            )
        if model.vocab_size < extended.vocab_size:  # grown now, or by the session that began this run
            model = model.model_copy(update={"vocab_size": extended.vocab_size})
        tokenizer = extended.path
    return tokenizer, model


def _holds_chat(config: RunConfig) -> bool:
    """Whether a source or an eval set of ``config`` holds conversations."""
    data = config.data
    return any(each.format == "chat" for each in [*data.sources.values(), *data.eval_sets.values()])


def _store_names(stores: list[str]) -> dict[str, str]:
    """Each store under its directory's name (``web``, ``web-2`` when two share one)."""
    named: dict[str, str] = {}
    for i, store in enumerate(stores):
        base = store.rstrip("/").rpartition("/")[2] or f"store{i}"
        name, n = base, 1
        while name in named:
            n += 1
            name = f"{base}-{n}"
        named[name] = store
    return named


def stdlib_directory(config: RunConfig) -> Path:
    """The cache of the standard library's tokenizer and store, for this Python, vocabulary and revision of
    the file selection (``-r2``: generated files left out; earlier caches, named ``-chat``, kept them)."""
    from meltemi.datastore.corpora import STDLIB_REVISION

    version, vocab = sysconfig.get_python_version(), config.model.vocab_size
    return Path(config.data.cache_dir) / f"stdlib-py{version}-v{vocab}-r{STDLIB_REVISION}"


def stdlib_tokenizer(config: RunConfig, say: Callable[[str], object]) -> str:
    """The standard library's tokenizer of ``model.vocab_size`` tokens, trained on first use."""
    from meltemi.datastore import corpora

    directory = stdlib_directory(config)
    if not (directory / "tokenizer.json").exists():
        say(f"training the standard-library tokenizer in {directory} (first run only)")
    return corpora.stdlib_tokenizer(directory, config.model.vocab_size)


def build_source(
    config: RunConfig,
    name: str,
    source: StoreOrCorpus,
    tokenizer: str,
    say: Callable[[str], object],
    *,
    section: str = "sources",
    recipe: ChatRecipe | None = None,
) -> dict[str, str]:
    """The stores of ``data.sources.NAME.corpus``, built on first use under ``data.cache_dir``: text
    documents, or chat conversations rendered by ``data.chat.template`` (conversations longer than
    ``data.seq_len`` + 1 tokens cut or left out as ``data.chat.overlong`` says); each build's summary line
    is said. ``{"store": ...}``, and ``"eval_store"`` for a data set whose files name a test (else
    validation) split beside the one trained on, as ``data.held_out: split`` asks: its held-out documents
    or conversations, as TRL's ``eval_dataset`` and Levanter's validation sets would be. An eval set's
    corpus (``section`` ``eval_sets``: ``data.eval_sets.NAME``) is built the same way, whole: no split of it
    is held out. A chat corpus is built with ``recipe`` (``data.chat`` resolved; else resolved here), whose
    identity is part of the store's cache key."""
    chat = config.data.chat
    corpus, field = source.corpus, f"data.{section}.{name}"
    if _is_stdlib(corpus) and source.format == "chat":
        raise ConfigError(
            f"{field}.corpus: {corpus} is text (the standard library's source files); its chat "
            f"corpus is {STDLIB_CHAT}"
        )
    if _is_stdlib(corpus):  # its files (or some), tokenized with this run's tokenizer (a base's, say)
        inputs, identity = _stdlib_inputs(corpus, field)
    elif corpus == STDLIB_CHAT:
        corpus = stdlib_chat_corpus(config, say)
        inputs, identity = corpus, _resolved(corpus)
    else:
        corpus = present_corpus(corpus, f"{field}.corpus")
        inputs, identity = corpus, _resolved(corpus)
    key = "\0".join([source.format, identity, file_sha256(tokenizer)])  # a copy finds the same store
    if source.format == "chat":
        recipe = recipe or chat_recipe(config)
        key += f"\0{recipe.cache_key()}"  # what decides the store's bytes
        key += "" if chat.messages_field == "messages" else f"\0messages_field={chat.messages_field}"
    key += "" if source.subset is None else f"\0subset={source.subset}"
    options = format_options(config, source, recipe)
    named = corpus if source.corpus == STDLIB_CHAT else source.corpus  # a Hub name, not its snapshot's hash
    stem = STDLIB if _is_stdlib(corpus) else Path(named.rstrip("/")).stem or "corpus"
    flags = SOURCE_FLAGS | {"subset": f"--{field}.subset {{}}"}
    if source.text_field is not None:
        flags["text_field"] = f"--{field}.text_field {{}}"
    if source.format == "chat":
        flags["text_field"] = MESSAGES_FLAG
    store, report = _cached_build(config, inputs, corpus, stem, key, tokenizer, say, flags, **options)
    if section != "sources":
        return {"store": store}
    held = _held_out_build(config, inputs, report, stem, key, tokenizer, say, flags, **options)
    return {"store": store} | held


def format_options(
    config: RunConfig, source: StoreOrCorpus, recipe: ChatRecipe | None = None
) -> dict[str, object]:
    """``build_store``'s options for what ``source`` holds (a corpus, or a store's ``build_from``): text read
    from its ``text_field`` or ``data.text_field``, or conversations made by ``recipe`` (``data.chat``
    resolved; else resolved here).

    >>> from meltemi.trainer.config import RunConfig
    >>> format_options(RunConfig(), StoreOrCorpus(store="s", build_from="raw/"))
    {'subset': None, 'text_field': 'text'}
    """
    data, chat = config.data, config.data.chat
    if source.format == "text":
        return {"subset": source.subset, "text_field": source.text_field or data.text_field}
    return {
        "subset": source.subset,
        "format": "chat",
        "recipe": recipe or chat_recipe(config),
        "text_field": chat.messages_field,
    }


def _is_stdlib(corpus: str) -> bool:
    """Whether ``corpus`` names the standard library's source, or some of its files (``stdlib:email/*``)."""
    return corpus == STDLIB or corpus.startswith(STDLIB_PARTS)


def _stdlib_inputs(corpus: str = STDLIB, field: str = "data.corpus") -> tuple[list[str], str]:
    """The standard library's source files (``corpus: stdlib`` with a tokenizer other than its own; those
    under its root that match ``stdlib:PATTERN,PATTERN``), and what names them in a cached store's key:
    this Python's version, the corpus's revision and the patterns."""
    from meltemi.datastore import corpora

    identity = f"{STDLIB}-py{sysconfig.get_python_version()}-r{corpora.STDLIB_REVISION}"
    if corpus == STDLIB:
        return corpora.python_stdlib(), identity
    patterns = [word.strip() for word in corpus.removeprefix(STDLIB_PARTS).split(",") if word.strip()]
    files = corpora.python_stdlib(parts=patterns)
    if not files:
        root = sysconfig.get_paths()["stdlib"]
        raise ConfigError(
            f"{field}.corpus: {corpus} matches none of the standard library's source files: give shell "
            f"patterns of their paths under {root}, comma-separated (stdlib:email/*,json/*)"
        )
    return files, f"{identity}\0{','.join(patterns)}"


def _held_out_build(config: RunConfig, corpus: str, report: BuildReport, name: str, key: str, tokenizer: str,
                    say, flags, **options) -> dict[str, str]:  # fmt: skip
    """``{"eval_store": ...}``: the test (else validation) split of the data set whose train split
    ``report`` says was built, as ``data.held_out: split`` asks, built on first use as that one was; empty
    when the data set has no such split (or ``data.held_out`` is ``tail``)."""
    from meltemi.datastore.build.inputs.dataset_files import held_out_split

    if config.data.held_out != "split" or report.split is None:
        return {}
    split = held_out_split(report.other_splits, report.split)  # the splits its build left out
    if split is None:
        return {}
    shown, key = f"{corpus} (its {split} split, held out)", f"{key}\0split={split}"
    store, _ = _cached_build(config, corpus, shown, f"{name}-{split}", key, tokenizer, say, flags, **options,
                             split=split)  # fmt: skip
    return {"eval_store": store}


def _cached_build(config: RunConfig, inputs, shown: str, name: str, key: str, tokenizer: str, say, flags,
                  **options) -> tuple[str, BuildReport]:  # fmt: skip
    """The store of ``inputs`` under ``data.cache_dir/corpora``, named by ``name`` and a hash of ``key``
    (what decides its bytes), built on first use as the data config and ``options`` say, and its build's
    report (whose summary line is said); an error's remedies name the command's ``flags``."""
    from meltemi.datastore import DatastoreError, build_store

    data = config.data
    out = Path(data.cache_dir) / "corpora" / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    if not (out / "manifest.json").exists():
        kind = "chat" if options.get("format") == "chat" else "token"
        say(f"building a {kind} store of {shown} in {out} (first use only)")
    try:
        report = build_store(
            inputs,
            tokenizer,
            out,
            skip_bad_lines=data.skip_bad_lines,
            invalid_utf8=data.invalid_utf8,
            overwrite=data.rebuild_corpus,
            progress=True,
            **options,
        )
    except DatastoreError as error:
        raise in_command_words(error, flags) from None
    say(report.summary())
    return str(out), report


def stdlib_chat_corpus(config: RunConfig, say: Callable[[str], object]) -> str:
    """The standard library's chat corpus (``stdlib-chat``): a JSONL of conversations about its functions,
    written on first use under ``data.cache_dir`` for this Python."""
    from meltemi.datastore.chat.stdlib import VERSION, stdlib_chat

    directory = f"stdlib-chat-v{VERSION}-py{sysconfig.get_python_version()}"
    out = Path(config.data.cache_dir) / directory / "stdlib_chat.jsonl"
    if not out.exists():
        say(f"writing the standard-library chat corpus in {out} (first run only)")
        out.parent.mkdir(parents=True, exist_ok=True)
        stdlib_chat(out)
    return str(out)


def _resolved(path: str) -> str:
    """A path made absolute (a URL as it is), so the same file names the same cached store."""
    local = local_path_of(path)
    return path if local is None else local.resolve().as_posix()


def refuse_missing_inputs(config: RunConfig) -> None:
    """A ``ConfigError`` naming the first of the run's tokenizer and token stores or corpora (``data.stores``,
    else ``data.corpus``, else each source's; each eval set's) that is not there, a local path or a data set
    not in the cache (a bucket URL is checked when read): said before anything is trained or built.

    >>> from meltemi.trainer.config import RunConfig
    >>> refuse_missing_inputs(RunConfig(data={"corpus": "no/such/file.txt"}))
    Traceback (most recent call last):
    ...
    meltemi.trainer.errors.ConfigError: data.corpus: no/such/file.txt: no such file or directory
    """
    data = config.data
    if (missing := _missing_tokenizer(data.tokenizer)) is not None:
        raise missing
    if data.stores:
        for store in data.stores:
            if _missing(store, Path.is_dir):
                raise ConfigError(
                    f"data.stores: {store}: no such token store (the directory does not exist): "
                    f"{BUILD_A_STORE.format(path=store)}"
                )
    elif data.corpus is not None:
        if data.corpus != STDLIB:
            present_corpus(data.corpus, "data.corpus")
    else:
        _refuse_missing_corpora(data.sources, "sources")
    _refuse_missing_corpora(data.eval_sets, "eval_sets")


def _refuse_missing_corpora(sources: dict[str, StoreOrCorpus], section: str) -> None:
    for name, source in sources.items():
        corpus = source.corpus
        if corpus is None or _is_stdlib(corpus) or corpus == STDLIB_CHAT:
            continue
        present_corpus(corpus, f"data.{section}.{name}.corpus")


def _missing_tokenizer(tokenizer: str | None) -> ConfigError | None:
    """The error for a ``data.tokenizer`` that is not there (not ``stdlib``, a local path); else None."""
    if tokenizer is None or tokenizer == STDLIB or not _missing(tokenizer, Path.is_file):
        return None
    return ConfigError(
        f"data.tokenizer: {tokenizer}: no such file (a tokenizer.json, a model directory holding one, or "
        f"stdlib){not_cached(tokenizer, 'model')}"
    )


def present_corpus(corpus: str, field: str) -> str:
    """``corpus`` (a local path, a URL or a data set's name) as it is read: the path, the URL, or the data
    set's snapshot in the cache; a ``ConfigError`` naming ``field`` when it is neither a file or directory
    here nor a data set in the cache (a URL is checked when read).

    >>> present_corpus("no/such/file.txt", "data.corpus")
    Traceback (most recent call last):
    ...
    meltemi.trainer.errors.ConfigError: data.corpus: no/such/file.txt: no such file or directory
    """
    found = local_or_cached(corpus, "dataset")
    if _missing(found, Path.exists):
        raise ConfigError(f"{field}: {corpus}: no such file or directory{not_cached(corpus, 'dataset')}")
    return found


def _missing(path: str, there: Callable[[Path], bool]) -> bool:
    """Whether a local path (or `file://` URL) is not there as ``there`` wants; a URL is checked when read."""
    local = local_path_of(path)
    return local is not None and not there(local)


def build_corpus(
    config: RunConfig, tokenizer: str, say: Callable[[str], object]
) -> tuple[str, dict[str, str]]:
    """``(name, {"store": ...})`` of ``data.corpus`` tokenized with ``tokenizer``, built on first use (the
    standard library's tokenizer and store together when both are ``stdlib``), read as ``data.text_field``,
    ``data.skip_bad_lines`` and ``data.invalid_utf8`` say, with its data set's held-out split as
    ``"eval_store"`` (``data.held_out``); each build's summary line is said."""
    from meltemi.datastore import corpora

    data = config.data
    if data.corpus == STDLIB:
        directory = stdlib_directory(config)
        if data.tokenizer == STDLIB:
            if not (directory / "store" / "manifest.json").exists():
                say(f"building the standard-library corpus in {directory} (first run only)")
            return STDLIB, {
                "store": corpora.stdlib_corpus(directory, config.model.vocab_size, progress=True, say=say)[1]
            }
        (inputs, key), name = _stdlib_inputs(), STDLIB
    else:
        inputs, name = local_or_cached(data.corpus, "dataset"), Path(data.corpus).stem or "corpus"
        key = _resolved(inputs)
    key += "\0" + _resolved(tokenizer)
    text_field = {"text_field": data.text_field}
    flags = CORPUS_FLAGS | {"subset": _as_source_with_subset(name, data.corpus)}
    store, report = _cached_build(config, inputs, data.corpus, name, key, tokenizer, say, flags, **text_field)
    return name, {"store": store} | _held_out_build(config, inputs, report, name, key, tokenizer, say, flags,
                                                    **text_field)  # fmt: skip


def _as_source_with_subset(name: str, corpus: str) -> str:
    """How a user reads a subset of ``data.corpus``, which has no field for one: the same corpus as a source
    of ``data.sources`` with its ``subset`` (a hint's format string, ``{}`` taking the subset).

    >>> print(_as_source_with_subset("wikitext", "Salesforce/wikitext").format("wikitext-103-raw-v1"))
    --data.sources '{"wikitext": {"corpus": "Salesforce/wikitext", "subset": "wikitext-103-raw-v1"}}'
    """
    spelled = shlex.quote(json.dumps({name: {"corpus": corpus, "subset": _SUBSET}}))
    return "--data.sources " + spelled.replace("{", "{{").replace("}", "}}").replace(_SUBSET, "{}")


_SUBSET = "<the subset>"  # where a hint's subset goes
