"""What a Stacked fold saves for its backward pass under each checkpoint policy: the shapes of the scan's
residual outputs in the gradient's jaxpr, as Haliax's policies give them (carries, inputs, internals)."""

import equinox as eqx
import jax
import pytest

import haliax_lite as hax
from haliax_lite.nn import ScanCheckpointPolicy, Stacked

Block = hax.Axis("block", 4)
E = hax.Axis("E", 10)


class SinCos(eqx.Module):
    named: hax.NamedArray

    def __call__(self, x):
        y = hax.tree_checkpoint_name(hax.sin(x + self.named), "sin")
        y = hax.tree_checkpoint_name(hax.cos(y + x), "cos")
        return y + x

    @staticmethod
    def init(named):
        return SinCos(named)


# (policy, shapes of the forward scan's outputs in the gradient's jaxpr: the carry, then what it saves)
CASES = {
    "disabled": (ScanCheckpointPolicy(disable=True), [(E.size,), (Block.size, E.size), (Block.size, E.size)]),
    "carry_true": (True, [(E.size,), (Block.size, E.size)]),
    "carry": (
        ScanCheckpointPolicy(save_carries=True, save_block_internals=False),
        [(E.size,), (Block.size, E.size)],
    ),
    "everything": (
        ScanCheckpointPolicy(save_carries=True, save_inputs=True, save_block_internals=True),
        [(E.size,), (Block.size, E.size), (Block.size, E.size)],
    ),
    "internals": (
        ScanCheckpointPolicy(save_carries=False, save_block_internals=True),
        [(E.size,), (Block.size, E.size), (Block.size, E.size)],
    ),
    "cos": (
        ScanCheckpointPolicy(save_carries=False, save_block_internals=["cos"]),
        [(E.size,), (Block.size, E.size)],
    ),
    "sin": (
        ScanCheckpointPolicy(save_carries=True, save_block_internals=["sin"]),
        [(E.size,), (Block.size, E.size), (Block.size, E.size)],
    ),
    "simple": (ScanCheckpointPolicy(simple=True), [(E.size,), (Block.size, E.size)]),
    "nested": (ScanCheckpointPolicy(simple=True, nested=2), [(E.size,), (2, E.size)]),
    "sin_offload": (
        ScanCheckpointPolicy(save_carries=True, offload_block_internals=["sin"]),
        [(E.size,), (Block.size, E.size), (Block.size, E.size)],
    ),
}


def _scan_output_shapes(policy):
    named = hax.random.uniform(jax.random.PRNGKey(0), (Block, E))
    module = Stacked.init(Block, SinCos, gradient_checkpointing=policy)(named=named)

    def loss(m, x):
        return hax.sum(m.fold(x)).scalar()

    jaxpr = jax.make_jaxpr(eqx.filter_grad(loss))(module, hax.random.uniform(jax.random.PRNGKey(1), (E,)))
    scan = next(eqn for eqn in jaxpr.jaxpr.eqns if eqn.primitive is jax.lax.scan_p)
    return [out.aval.shape for out in scan.outvars]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_stacked_fold_saves_what_haliax_saves(name):
    policy, expected = CASES[name]
    assert _scan_output_shapes(policy) == expected
