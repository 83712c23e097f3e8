"""A small data set of the user's own trains by default: a held-out split smaller than a batch is evaluated
as it is (one partial batch, padded to the compiled batch with rows that count nothing, its loss the mean over
its real targets), a training part that is smaller than a batch or read for many epochs is said, and a chat
run's summary replies to the user's own held-out conversation when asked to (``trainer.reply_to``)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.datastore import BatchLoader
from meltemi.datastore.sequences import Rows
from meltemi.trainer.data.run_data import MANY_EPOCHS, EveryRow
from meltemi.trainer.generate.replies import reply_prompt
from meltemi.trainer.trainer import Trainer


def trainer_of(config, run_dir):
    return Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)


def eval_sums(trainer, state, batch: dict, rows: int):
    """The eval step's sums over one host batch of ``rows`` rows."""
    table = np.asarray(trainer.data.token_bytes)
    lengths = jnp.asarray(np.pad(table, (0, trainer.config.model.vocab_size - len(table))))
    with jax.set_mesh(trainer.plan.mesh):
        return trainer.evaluation.step_program()(
            state.model, trainer.program.device_batch(batch, rows), lengths
        )


def test_a_held_out_split_smaller_than_a_batch_is_evaluated_as_one_partial_batch(make_config, tmp_path):
    """The split of 0.0001 of the store is a row or two, fewer than the batch of 16: evaluated once, in the
    batch the eval step was compiled for, and its loss is that of its rows alone."""
    trainer = trainer_of(make_config("--data.eval_fraction", "0.0001"), tmp_path / "run")
    loader, batch = trainer.data.held_out["py"], trainer.config.trainer.global_batch_size
    split = loader.dataset.dataset
    assert isinstance(loader.dataset, EveryRow) and 1 <= split.num_sequences < batch
    assert trainer.data.eval_steps["py"] == 1 and loader.schedule.size(0) == batch
    padded = loader.batch(0)
    count = split.num_sequences
    assert not padded["loss_mask"][count:].any() and padded["loss_mask"][:count].any()

    state = trainer.initial_state()
    metrics = trainer.evaluation(state)
    alone = BatchLoader(split, count).batch(0)
    sums = eval_sums(trainer, state, alone, count)
    assert float(sums.tokens) == padded["loss_mask"].sum()
    assert metrics["eval/py/loss"] == pytest.approx(float(sums.loss) / float(sums.tokens), rel=1e-5)


class Given:
    """``rows`` rows of tokens and 0/1 loss weights, as a held-out split gives them."""

    def __init__(self, tokens: np.ndarray, weights: np.ndarray):
        self.tokens, self.weights, self.num_sequences = tokens, weights, len(tokens)

    def read(self, indices):
        indices = np.asarray(indices)
        rows, width = len(indices), self.tokens.shape[1]
        positions = np.broadcast_to(np.arange(width, dtype=np.int32), (rows, width)).copy()
        return Rows(self.tokens[indices], np.zeros((rows, width), np.int32), np.zeros(rows, np.int32),
                    positions, self.weights[indices])  # fmt: skip


def test_a_partial_batch_sums_exactly_the_loss_of_its_rows_unpadded(make_config, tmp_path):
    """The invariant: a split of fewer rows than a batch, padded with rows that count nothing, gives the same
    summed loss and the same count of targets as those rows evaluated alone (so its mean loss is over its
    real targets only), whatever the rows and their weights."""
    config = make_config("--trainer.global_batch_size", "4")
    trainer = trainer_of(config, tmp_path / "run")
    state = trainer.initial_state()
    width, vocab = config.data.seq_len + 1, config.model.vocab_size

    @settings(deadline=None)
    @given(rows=st.integers(1, 3), seed=st.integers(0, 2**32 - 1), share=st.floats(0.05, 1.0))
    def padded_equals_alone(rows, seed, share):
        rng = np.random.default_rng(seed)
        tokens = rng.integers(0, vocab, (rows, width)).astype(np.int32)
        weights = (rng.random((rows, width)) < share).astype(np.uint8)
        split = Given(tokens, weights)
        padded = eval_sums(trainer, state, BatchLoader(EveryRow(split, 4), 4).batch(0), 4)
        alone = eval_sums(trainer, state, BatchLoader(split, rows).batch(0), rows)
        assert float(padded.tokens) == float(alone.tokens) == weights[:, 1:].sum()
        assert float(padded.loss) == pytest.approx(float(alone.loss), rel=1e-5, abs=1e-4)
        assert float(padded.bytes) == pytest.approx(float(alone.bytes))

    padded_equals_alone()


def test_a_source_read_for_many_epochs_is_said_at_the_start(make_config, tmp_path):
    small = trainer_of(make_config(), tmp_path / "small")
    assert small.data.notes == ()  # 6 steps of 16 rows: a small part of an epoch
    rows = small.data.train.dataset.sources[0].num_sequences
    steps = (MANY_EPOCHS + 1) * rows // 16 + 1
    repeated = trainer_of(make_config("--trainer.num_train_steps", str(steps)), tmp_path / "many")
    [note] = repeated.data.notes
    assert note.startswith(f"source 'py' {steps:,} steps read its {rows:,} rows 11 times (past 10 epochs")
    assert note.endswith(": add data or lower --trainer.num_train_steps")


def test_the_summary_replies_to_the_first_user_message_of_the_held_out_conversations(
    sft_config, chat_data, tmp_path
):
    """``trainer.reply_to: held_out``: the reply is to the first held-out conversation's user message (the
    store's tail, read back from its tokens), not to trainer.sample_prompt."""
    lines = chat_data.read_text().splitlines()
    held = min(len(lines) - 1, max(1, round(len(lines) * 0.1)))  # data.eval_fraction 0.1
    first = json.loads(lines[len(lines) - held])["messages"]
    expected = next(m["content"] for m in first if m["role"] == "user")
    asked = trainer_of(sft_config("--trainer.reply_to", "held_out", "--trainer.sample_prompt", "Hi"),
                       tmp_path / "asked")  # fmt: skip
    assert reply_prompt(asked.config, asked.data) == expected.strip()
    default = trainer_of(sft_config("--trainer.sample_prompt", "Hi"), tmp_path / "default")
    assert reply_prompt(default.config, default.data) == "Hi"


def test_a_user_message_is_read_back_from_its_rendered_tokens(sft_config, tmp_path):
    """What the summary replies to is the user's message exactly, after a system message or none, whatever
    its text (the template trims it, as Llama 3's does)."""
    from meltemi.trainer.data.run_tokenizer import tokenizer_at
    from meltemi.trainer.data.user_message import first_user_message

    trainer = trainer_of(sft_config(), tmp_path / "run")
    tokenizer, template = tokenizer_at(trainer.config.data.tokenizer), trainer.data.chat.template
    words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=40)

    @settings(deadline=None)
    @given(text=words.map(str.strip).filter(bool), system=st.none() | words)
    def read_back(text, system):
        messages = [*([] if system is None else [{"role": "system", "content": system}])]
        messages.append({"role": "user", "content": text})
        rendered = template.render(messages, add_generation_prompt=True, **template.special_tokens).text
        ids = tokenizer.encode(rendered, add_special_tokens=False).ids
        assert first_user_message(ids, tokenizer, template) == text

    read_back()
