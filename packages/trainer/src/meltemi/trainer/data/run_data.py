"""The run's data from its config: the training mixture and a held-out split per source, checked first.

Each source's store is split into a training range and a held-out tail (``data.eval_fraction``): a text
store's tail of tokens, read as rows of ``data.seq_len + 1`` tokens across documents; a chat store's last
conversations, each part packed whole into rows (``meltemi.datastore.PackedDataset``). A source with an
``eval_store`` (a data set's test split) trains its whole store and evaluates that one whole instead.
Training reads a block-deterministic mixture of the training ranges (``data.sources`` weights, or
``data.stages``); evaluation reads each source's held-out part on its own, in order, and so each eval set
(``data.eval_sets``: stores never trained on, read whole), ``trainer.eval_batches`` batches of each, or
every row (``all``: the last batch filled out with rows that count no target, so that every batch has the
shape the eval step was compiled for). A held-out part smaller than one batch is read that way too, as one
partial batch: a small data set is evaluated as it is. A training part smaller than a batch, or read more
than ``MANY_EPOCHS`` times, is said in ``RunData.notes``. Every batch is a pure function of the step, and
each process reads only its rows.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from meltemi.datastore import (
    BatchLoader,
    BatchSchedule,
    DatastoreError,
    MixtureDataset,
    NoSuchStoreError,
    PackedDataset,
    SequenceDataset,
    TokenStore,
    hold_out,
    hold_out_conversations,
    token_byte_lengths,
)
from meltemi.datastore.chat.recipe import ChatRecipe
from meltemi.trainer.adapters import data_key
from meltemi.trainer.config import RunConfig
from meltemi.trainer.data.run_tokenizer import EndOfText, end_of_text
from meltemi.trainer.data.sources import BUILD_A_STORE
from meltemi.trainer.data.store_builds import BUILD_THEM
from meltemi.trainer.errors import DataError

# Past this many epochs of a source a run is said to repeat it: TRL's and transformers' Trainer default to 3
# epochs, and the small-data recipes that go furthest (LIMA: 15 epochs of 1,000 conversations) stay near 10;
# beyond that a model mostly memorizes its rows, which a user with a small file should hear at once.
MANY_EPOCHS = 10
LOOKED_AT = 64  # held-out conversations looked at for one whose prompt the summary's reply can follow


@dataclasses.dataclass
class RunData:
    """The loaders of one process: training batches by step, the held-out batches of each source and then
    of each eval set (``held_out``, with how many of them an evaluation reads: ``eval_steps``; the eval sets'
    tags in ``eval_set_tags``), the token that ends a text (the one the stores end their documents with, or
    a chat run's end of turn), a chat run's template (None for text only), the chat sources' names and, per
    chat source, how its conversations packed; ``notes``, a line per source whose training part is smaller
    than a batch or read more than ``MANY_EPOCHS`` times; and ``held_out_prompt``, the token ids of the first
    chat source's first held-out conversation up to its first trained token (None without one)."""

    train: BatchLoader
    held_out: dict[str, BatchLoader]
    eval_steps: dict[str, int]
    source_names: list[str]
    token_bytes: np.ndarray | None
    end_of_text: EndOfText
    chat: ChatRecipe | None = None
    chat_sources: tuple[str, ...] = ()
    packing: dict[str, str] = dataclasses.field(default_factory=dict)
    eval_set_tags: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()
    held_out_prompt: np.ndarray | None = None


def _open_store(name: str, path: str, tokenizer: str | None, field: str = "store", built_from: bool = False,
                section: str = "sources", vocab_size: int | None = None) -> TokenStore:  # fmt: skip
    """The store at ``path`` (``data.<section>.<name>.<field>``), checked against the run's tokenizer and,
    given one, the model's ``vocab_size``."""
    try:
        store = TokenStore.open(path, tokenizer=tokenizer)
    except NoSuchStoreError as e:
        remedy = BUILD_THEM if built_from else BUILD_A_STORE.format(path=path)
        raise DataError(f"data.{section}.{name}.{field}: {e}: {remedy}") from None
    except DatastoreError as e:
        raise DataError(f"data.{section}.{name}.{field}: {e}") from None
    if vocab_size is not None and store.vocab_size != vocab_size:
        raise DataError(
            f"data.{section}.{name}.{field}: {path} was tokenized with a vocabulary of {store.vocab_size}, "
            f"but model.vocab_size is {vocab_size}"
        )
    return store


def open_data(config: RunConfig, process_index: int = 0, process_count: int = 1) -> RunData:
    """Open and check every store, then build the loaders; a ``DataError`` names the field at fault."""
    data, trainer = config.data, config.trainer
    if not data.sources:
        raise DataError("data.sources is empty: name at least one token store (data.sources.NAME.store)")
    trains, held, eos_ids, chats, packing = {}, {}, [], {}, {}
    for name, source in data.sources.items():
        store = _open_store(name, source.store, data.tokenizer, built_from=source.build_from is not None,
                            vocab_size=config.model.vocab_size)  # fmt: skip
        eos_ids.append(store.manifest["tokenizer"].get("eos_id"))
        if data.held_out == "none":  # trained on whole; the eval sets are what is evaluated
            if store.is_chat:
                chats[name] = _recipe(store, f"data.sources.{name}.store")
            trains[name] = _whole(name, store, config)
            if store.is_chat:
                packing[name] = trains[name].report() + _epochs(name, trains[name].num_sequences, config)
            continue
        if store.is_chat:
            chats[name] = _recipe(store, f"data.sources.{name}.store")
            trains[name], held[name] = _packed(name, store, source.eval_store, config)
            packing[name] = trains[name].report() + _epochs(name, trains[name].num_sequences, config)
            if source.eval_store is not None:
                packing[name] += f"; held out: {held[name].report()} ({source.eval_store})"
            continue
        if source.eval_store is not None:
            trains[name], held[name] = _text_and_held_out(name, store, source.eval_store, config)
            packing[name] = f"held out: {held[name].num_sequences:,} sequences ({source.eval_store})"
            continue
        if store.num_tokens < 2 * (data.seq_len + 1):
            raise DataError(
                f"data.seq_len {data.seq_len}: {source.store} holds {store.num_tokens} tokens, too few for "
                "one training and one held-out sequence; lower data.seq_len or add data"
            )
        try:
            sequences = SequenceDataset(store, data.seq_len, reset_positions=data.reset_positions)
            trains[name], held[name] = hold_out(sequences, data.eval_fraction)
        except ValueError as e:
            raise DataError(f"data.eval_fraction: {source.store}: {e}") from None
    chat = _one_template(chats)
    schedule = BatchSchedule(trainer.global_batch_size)
    try:
        mixture = MixtureDataset(
            trains, _stages(config, schedule), data.mixture_block_size, data_key(trainer.seed, "mixture")
        )
    except ValueError as e:
        raise DataError(f"data.sources weights / data.stages: {e}") from None
    eval_batch = schedule.size(0)
    model_len = config.model.max_seq_len  # the summary's reply: the prompt and its new tokens
    prompt = _held_out_prompt(held, chats, model_len - reply_tokens(model_len))
    held |= _eval_sets(config, chats, packing)
    eval_steps = {}
    for name, h in held.items():
        if trainer.eval_batches == "all" or h.num_sequences < eval_batch:  # every row, the last batch filled
            eval_steps[name] = math.ceil(h.num_sequences / eval_batch)
            held[name] = EveryRow(h, eval_batch)
        else:
            eval_steps[name] = min(trainer.eval_batches, h.num_sequences // eval_batch)
    return RunData(
        train=BatchLoader(mixture, trainer.global_batch_size, process_index, process_count),
        held_out={n: BatchLoader(h, eval_batch, process_index, process_count) for n, h in held.items()},
        eval_steps=eval_steps,
        source_names=list(data.sources),
        token_bytes=token_byte_lengths(data.tokenizer) if data.tokenizer else None,
        end_of_text=end_of_text(data.tokenizer, eos_ids, _end_of_turn(chats)),
        chat=chat,
        chat_sources=tuple(chats),
        packing=packing,
        eval_set_tags={name: tuple(eval_set.tags) for name, eval_set in data.eval_sets.items()},
        notes=training_notes(trains, config),
        held_out_prompt=prompt,
    )


def _eval_sets(config: RunConfig, chats: dict[str, ChatRecipe], packing: dict[str, str]) -> dict[str, object]:
    """Each eval set's rows, read whole: a text store's as rows of ``data.seq_len + 1`` tokens across
    documents, a chat store's conversations packed whole into rows (rendered with the chat sources' template,
    when the run has chat sources; how they packed goes into ``packing``)."""
    data, opened = config.data, {}
    for name, eval_set in data.eval_sets.items():
        field = f"data.eval_sets.{name}.store"
        store = _open_store(name, eval_set.store, data.tokenizer, built_from=eval_set.build_from is not None,
                            section="eval_sets", vocab_size=config.model.vocab_size)  # fmt: skip
        if store.is_chat:
            mine = _recipe(store, field).template
            trained = next(iter(chats.values())).template if chats else mine
            if mine.sha256 != trained.sha256:
                raise DataError(
                    f"{field}: {store.path} was rendered with another chat template "
                    f"({mine.source}) than the chat sources ({trained.source})"
                )
            try:
                opened[name] = PackedDataset(store, data.seq_len)
            except ValueError as e:
                raise DataError(f"{field}: {e}") from None
            packing[name] = f"eval set: {opened[name].report()}"
            continue
        if store.num_tokens < data.seq_len + 1:
            raise DataError(
                f"{field}: {store.path} holds {store.num_tokens} tokens, fewer than one sequence of "
                f"data.seq_len + 1 = {data.seq_len + 1}; lower data.seq_len or add data"
            )
        opened[name] = SequenceDataset(store, data.seq_len, reset_positions=data.reset_positions)
    return opened


class EveryRow:
    """A held-out set read whole in batches of ``batch`` rows: its rows, then copies of its last row whose
    targets count nothing (their weights 0), up to a whole last batch, so that every batch has the shape the
    eval step was compiled for and the sums count each row once.

    >>> from meltemi.datastore.sequences import Rows
    >>> class Three:
    ...     num_sequences = 3
    ...     def read(self, i):
    ...         return Rows(np.stack([i, i + 1], axis=1), np.zeros((len(i), 2), np.int32), np.zeros(len(i)))
    >>> every = EveryRow(Three(), 2)
    >>> rows = every.read(np.arange(every.num_sequences))
    >>> rows.tokens[:, 0].tolist(), rows.weights.sum(axis=1).tolist()
    ([0, 1, 2, 2], [2, 2, 2, 0])
    """

    def __init__(self, dataset, batch: int):
        self.dataset, self.rows = dataset, dataset.num_sequences
        self.num_sequences = math.ceil(self.rows / batch) * batch

    def read(self, indices: np.ndarray):
        rows = self.dataset.read(np.minimum(indices, self.rows - 1)).filled()
        counted = (np.asarray(indices) < self.rows)[:, None]
        weights = np.where(counted, rows.weights, 0).astype(rows.weights.dtype)
        return dataclasses.replace(rows, weights=weights)


def _epochs(name: str, rows: int, config: RunConfig) -> str:
    """How many times the run reads a source's rows (its share of the run's rows, by its mixture weight:
    TRL's and the peers' epochs), in words; empty when stages change the weights.

    >>> from meltemi.trainer.config import RunConfig
    >>> config = RunConfig(data={"sources": {"chat": {"store": "s"}}}, trainer={"num_train_steps": 45,
    ...                                                                        "global_batch_size": 8})
    >>> _epochs("chat", 735, config)
    '; 45 steps of 8 rows read 360 of them: 0.49 epochs'
    """
    read, trainer = _rows_read(name, config), config.trainer
    if read is None:
        return ""
    about = "" if read == _rows_read_in_all(config) else "about "
    steps = f"{trainer.num_train_steps:,} steps of {trainer.global_batch_size:,} rows"
    return f"; {steps} read {about}{read:,.0f} of them: {read / rows:.2f} epochs"


def _rows_read_in_all(config: RunConfig) -> int:
    """The rows of every batch of the run, by its batch schedule."""
    return BatchSchedule(config.trainer.global_batch_size).first_row(config.trainer.num_train_steps)


def _rows_read(name: str, config: RunConfig) -> float | None:
    """The rows the run reads from source ``name``: its share of every batch's rows by its mixture weight;
    None when stages change the weights (or they are all 0: the mixture's own error says so)."""
    data = config.data
    weights = sum(source.weight for source in data.sources.values())
    if data.stages or not weights:
        return None
    return _rows_read_in_all(config) * data.sources[name].weight / weights


def training_notes(trains: dict[str, object], config: RunConfig) -> tuple[str, ...]:
    """A line for each source whose training rows are fewer than a batch, or which the run reads more than
    ``MANY_EPOCHS`` times (by its mixture weight; with ``data.stages``, the batch alone is checked): a
    small data set trains, but the user hears that it is repeated, and how to change it.

    >>> from types import SimpleNamespace
    >>> config = RunConfig(data={"sources": {"mine": {"store": "s"}}}, trainer={"num_train_steps": 120,
    ...                                                                        "global_batch_size": 8})
    >>> training_notes({"mine": SimpleNamespace(num_sequences=2)}, config)
    ("source 'mine' trains on 2 rows, fewer than a batch of 8 (each batch repeats them); 120 steps read them \
480 times (past 10 epochs a model mostly memorizes its rows): add data or lower --trainer.num_train_steps",)
    >>> training_notes({"mine": SimpleNamespace(num_sequences=400)}, config)
    ()
    """
    trainer = config.trainer
    batch = min(trainer.batch_sizes())
    notes = []
    for name, rows in ((name, train.num_sequences) for name, train in trains.items()):
        said = []
        if rows < batch:
            plural = "s" * (rows != 1)
            repeats = "each batch repeats them"
            said.append(f"trains on {rows} row{plural}, fewer than a batch of {batch} ({repeats})")
        read = _rows_read(name, config)
        epochs = 0.0 if read is None else read / rows
        if epochs > MANY_EPOCHS:
            what = "them" if said else f"its {rows:,} rows"
            said.append(
                f"{trainer.num_train_steps:,} steps read {what} {epochs:,.0f} times (past {MANY_EPOCHS} "
                "epochs a model mostly memorizes its rows)"
            )
        if said:
            remedy = "add data or lower --trainer.num_train_steps" if epochs > MANY_EPOCHS else "add data"
            notes.append(f"source {name!r} {'; '.join(said)}: {remedy}")
    return tuple(notes)


def reply_tokens(max_seq_len: int) -> int:
    """The most tokens a chat run's summary's reply may have, with a model of ``max_seq_len`` positions.

    >>> reply_tokens(512), reply_tokens(64)
    (96, 32)
    """
    return min(96, max_seq_len // 2)


def _held_out_prompt(
    held: dict[str, object], chats: dict[str, ChatRecipe], longest: int
) -> np.ndarray | None:
    """The token ids of the first chat source's first held-out conversation (of its first ``LOOKED_AT``)
    whose prompt, its tokens up to its first trained one (the system's and the user's turns and the
    assistant's header, as training rendered them), is at most ``longest`` tokens; None when no chat source
    holds one out, or none of those has such a prompt (each trains every token or none, or is too long)."""
    for name in chats:
        part = held.get(name)
        if not isinstance(part, PackedDataset):
            continue
        for doc in range(part.first, min(part.stop, part.first + LOOKED_AT)):
            trained = np.flatnonzero(np.asarray(part.store.doc_weights(doc)) > 0)
            if len(trained) and 0 < trained[0] <= longest:
                return np.asarray(part.store.doc(doc)[: trained[0]])
        return None
    return None


def _text_and_held_out(name: str, store: TokenStore, eval_store: str, config: RunConfig):
    """A text store's sequences, every one trained, and every sequence of ``eval_store`` held out (rows of
    ``data.seq_len + 1`` tokens read across documents, as the store's own are)."""
    data = config.data
    held = _open_store(name, eval_store, data.tokenizer or store.tokenizer_hash, "eval_store")
    if held.is_chat:
        raise DataError(
            f"data.sources.{name}.eval_store: {eval_store} is a chat store, but {store.path} is a text one"
        )
    tail = " or hold out the store's tail instead (--data.held_out tail)"
    for field, opened, remedy in (("store", store, ""), ("eval_store", held, tail)):
        if opened.num_tokens < data.seq_len + 1:
            raise DataError(
                f"data.sources.{name}.{field}: {opened.path} holds {opened.num_tokens} tokens, fewer than "
                f"one sequence of data.seq_len + 1 = {data.seq_len + 1}; lower data.seq_len{remedy}"
            )
    return tuple(
        SequenceDataset(s, data.seq_len, reset_positions=data.reset_positions) for s in (store, held)
    )


def _whole(name: str, store: TokenStore, config: RunConfig):
    """Every row of a source's store, none held out (``data.held_out: none``): a chat store's conversations
    packed whole, a text store's tokens in rows of ``data.seq_len + 1``."""
    try:
        if store.is_chat:
            return PackedDataset(store, config.data.seq_len)
        return SequenceDataset(store, config.data.seq_len, reset_positions=config.data.reset_positions)
    except ValueError as e:
        raise DataError(f"data.sources.{name}.store: {e}") from None


def _packed(name: str, store: TokenStore, eval_store: str | None, config: RunConfig):
    """A chat store's training and held-out conversations, each packed whole into rows: the store's tail
    held out, or every conversation of the store trained and every one of ``eval_store`` held out."""
    seq_len = config.data.seq_len
    if eval_store is None:
        try:
            return hold_out_conversations(store, seq_len, config.data.eval_fraction)
        except ValueError as e:
            raise DataError(f"data.sources.{name}.store: {e}") from None
    held = _open_store(name, eval_store, config.data.tokenizer or store.tokenizer_hash, "eval_store")
    for field, opened in (("store", store), ("eval_store", held)):
        if not opened.is_chat:
            raise DataError(f"data.sources.{name}.{field}: {opened.path} is a text store, not a chat one")
    field = f"data.sources.{name}"
    if (
        _recipe(held, f"{field}.eval_store").template.sha256
        != _recipe(store, f"{field}.store").template.sha256
    ):
        raise DataError(
            f"data.sources.{name}.eval_store: {eval_store} was rendered with another chat template than "
            f"{store.path}"
        )
    try:
        return PackedDataset(store, seq_len), PackedDataset(held, seq_len)
    except ValueError as e:
        raise DataError(f"data.sources.{name}: {e}") from None


def _recipe(store: TokenStore, field: str) -> ChatRecipe:
    """The chat recipe a chat store's manifest records, typed; a ``DataError`` naming ``field`` when the
    record cannot be read."""
    try:
        return ChatRecipe.from_manifest(store.manifest["chat"], f"{field}: {store.path}")
    except DatastoreError as e:
        raise DataError(str(e)) from None


def _one_template(chats: dict[str, ChatRecipe]) -> ChatRecipe | None:
    """The recipe of the chat sources' stores, whose template every one was rendered with (a ``DataError``
    when two differ): the first store's."""
    if not chats:
        return None
    (first, recipe), *others = chats.items()
    for name, other in others:
        if other.template.sha256 != recipe.template.sha256:
            raise DataError(
                f"data.sources: {first} and {name} were rendered with different chat templates "
                f"({recipe.template.source}, {other.template.source}); rebuild one with the other's"
            )
    return recipe


def _end_of_turn(chats: dict[str, ChatRecipe]) -> str | None:
    return next((recipe.turn_end for recipe in chats.values()), None)


def _stages(config: RunConfig, schedule: BatchSchedule) -> list[tuple[int, dict[str, float]]]:
    """Mixture stages in sequences: each stage's first step's first row, which must start a mixture block."""
    data = config.data
    if not data.stages:
        return [(0, {name: source.weight for name, source in data.sources.items()})]
    stages = []
    for i, stage in enumerate(data.stages):
        first = schedule.first_row(stage.start_step)
        if first % data.mixture_block_size:
            raise DataError(
                f"data.stages[{i}].start_step {stage.start_step} begins at sequence {first}, not a multiple "
                f"of data.mixture_block_size {data.mixture_block_size}; move the stage or change the block "
                "size"
            )
        stages.append((first, dict(stage.weights)))
    return stages
