"""Stacked as Haliax defines it: a fold or scan equals the blocks applied one by one, unstacked() gives
those blocks, state dicts name each block, and a wrong per-block size names the argument or field."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax

E = hax.Axis("embed", 4)


class Inner(eqx.Module):
    my_field: hax.NamedArray


class Block(eqx.Module):
    foo: Inner
    w: hax.NamedArray

    @classmethod
    def init(cls, *, key):
        k1, k2 = jax.random.split(key)
        return cls(Inner(hax.random.normal(k1, E)), hax.random.normal(k2, E))

    def __call__(self, x, bias):
        return hax.tanh(x * self.w + self.foo.my_field) + bias


class ScanBlock(Block):
    def __call__(self, x, bias):
        y = super().__call__(x, bias)
        return y, hax.sum(y, E)


def _stack(cls, layers: int, seed: int = 0):
    L = hax.Axis("layers", layers)
    return L, hax.nn.Stacked.init(L, cls)(key=jax.random.split(jax.random.PRNGKey(seed), layers))


@functools.partial(jax.jit, static_argnums=0)  # one program per drawn depth, for speed
def unstacked_scanned_and_folded(layers, seed):
    L, stack = _stack(ScanBlock, layers, seed)
    x = hax.random.normal(jax.random.PRNGKey(seed + 1), E)
    bias = hax.random.normal(jax.random.PRNGKey(seed + 2), (L, E)) * 0.1
    blocks = stack.unstacked()
    assert len(blocks) == layers and blocks[0].w.axes == (E,)
    carry, outputs = x, []
    for i, block in enumerate(blocks):
        carry, out = block(carry, bias["layers", i])
        outputs.append(out)
    folded = stack.fold_via(lambda b, c, a: b(c, a)[0])(x, bias)
    return carry, jnp.stack([o.array for o in outputs]), stack.scan(x, bias), folded


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 5), st.integers(0, 50))
def test_fold_and_scan_equal_the_unstacked_blocks_applied_in_sequence(layers, seed):
    carry, outputs, (folded_carry, scanned), folded = unstacked_scanned_and_folded(layers, seed)
    np.testing.assert_allclose(folded_carry.array, carry.array, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(scanned.array, outputs, rtol=1e-6, atol=1e-6)
    assert scanned.axes == (hax.Axis("layers", layers),)
    np.testing.assert_allclose(folded.array, carry.array, rtol=1e-6, atol=1e-6)


def test_blockseq_of_the_unstacked_blocks_folds_to_the_same_result():
    L, stack = _stack(Block, 3)
    seq = hax.nn.BlockSeq(list(stack.unstacked()), L, stack.gradient_checkpointing)
    x, bias = hax.ones(E), hax.zeros((L, E))
    np.testing.assert_allclose(seq.fold(x, bias).array, stack.fold(x, bias).array, rtol=1e-6, atol=1e-6)


def test_a_stacked_module_round_trips_through_its_own_state_dict():
    L, stack = _stack(Block, 3)
    flat = stack.to_state_dict("h")
    assert sorted(flat) == sorted(f"h.{i}.{n}" for i in range(3) for n in ("foo.my_field", "w"))
    np.testing.assert_array_equal(flat["h.1.foo.my_field"], stack.stacked.foo.my_field.array[1])
    back = stack.from_state_dict(flat, "h")
    np.testing.assert_array_equal(back.stacked.w.array, stack.stacked.w.array)


@pytest.mark.parametrize("kind", ["Stacked", "BlockSeq"])
def test_a_per_block_argument_of_the_wrong_size_is_named(kind):
    L, stack = _stack(Block, 3)
    module = (
        stack
        if kind == "Stacked"
        else hax.nn.BlockSeq(list(stack.unstacked()), L, stack.gradient_checkpointing)
    )
    with pytest.raises(
        ValueError, match=rf"{kind}\[layers=3\]: argument args\[0\] .* has 2 entries along 'layers'"
    ):
        module.fold(hax.ones(E), hax.zeros((L.resize(2), E)))
    with pytest.raises(ValueError, match=r"argument kwargs\['bias'\] .* has 5 entries along 'layers'"):
        module.fold(hax.ones(E), bias=hax.zeros((L.resize(5), E)))


def test_a_stacked_field_of_the_wrong_size_is_named_by_its_path():
    L, stack = _stack(Block, 3)
    bad = eqx.tree_at(lambda s: s.stacked.foo.my_field, stack, hax.zeros((L.resize(2), E)))
    with pytest.raises(
        ValueError, match=r"the stacked block's field foo\.my_field .* has 2 entries along 'layers'"
    ):
        bad.fold(hax.ones(E), hax.zeros(E))


def test_both_repeated_layers_are_block_foldable_and_give_single_layers():
    L, stack = _stack(Block, 3)
    seq = hax.nn.BlockSeq(list(stack.unstacked()), L, stack.gradient_checkpointing)
    for module in (stack, seq):
        assert isinstance(module, hax.nn.BlockFoldable)
        np.testing.assert_array_equal(module.get_layer(2).w.array, stack.stacked.w.array[2])
    assert not isinstance(stack.stacked, hax.nn.BlockFoldable)
