"""The run seed: every one of its 64 bits changes the parameters (as it changes the data order), seeds
below 2**32 keep the keys they always had, and a seed beyond 64 bits is refused by the config."""

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from meltemi.trainer.adapters import jax_key, purpose_id
from meltemi.trainer.config_io import load_config
from meltemi.trainer.errors import ConfigError

MAX_SEED = 2**64 - 1


def key_bits(key) -> list[int]:
    return np.asarray(jax.random.key_data(key)).tolist()


@given(seed=st.integers(0, 2**32 - 1))
def test_seeds_below_two_to_the_32_keep_their_keys(seed):
    before = jax.random.fold_in(jax.random.key(seed), purpose_id("init"))
    assert key_bits(jax_key(seed, "init")) == key_bits(before)


@given(low=st.integers(0, 2**32 - 1), high=st.integers(1, 2**32 - 1))
def test_the_high_32_bits_of_the_seed_change_the_key(low, high):
    assert key_bits(jax_key(low, "init")) != key_bits(jax_key(high << 32 | low, "init"))


def test_a_seed_2_to_the_32_apart_initialises_other_parameters(make_config):
    from meltemi.trainer.step.mesh import MeshPlan
    from meltemi.trainer.step.program import TrainProgram

    def embedding(seed):
        config = make_config("--trainer.seed", str(seed))
        state = TrainProgram(config, MeshPlan.of(config, jax.devices()[:1])).initial_state()
        return np.asarray(state.model.embed_tokens.weight.array)

    assert not np.array_equal(embedding(11), embedding(2**32 + 11))


def test_the_largest_seed_is_accepted_and_one_more_is_refused_with_the_range():
    assert load_config(None, ["--trainer.seed", str(MAX_SEED)]).trainer.seed == MAX_SEED
    jax_key(MAX_SEED, "init")  # no OverflowError
    with pytest.raises(ConfigError, match=rf"^trainer.seed: .*less than or equal to {MAX_SEED}"):
        load_config(None, ["--trainer.seed", str(MAX_SEED + 1)])
