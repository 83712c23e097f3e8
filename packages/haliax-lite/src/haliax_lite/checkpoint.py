"""Gradient-checkpointing (rematerialization) policies for ``scan``/``fold`` and ``nn.Stacked``.

A :class:`ScanCheckpointPolicy` names what each scanned block keeps for the backward pass: its carry, its
inputs, named internals (tagged with :func:`tree_checkpoint_name`), everything, or nothing; saved values can
be offloaded to host memory where the backend has it; ``nested`` splits the scan into about sqrt(N)
checkpointed groups so that only O(sqrt(N)) carries are kept.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import jax
from jax.ad_checkpoint import checkpoint_name

from .core import NamedArray, is_named_array

__all__ = ["ScanCheckpointPolicy", "ScanCheckpointSpec", "tree_checkpoint_name"]

_STRING_POLICIES = ("full", "recompute", "save_nothing", "save_all", "nested", "offload")


def tree_checkpoint_name(x, name: str):
    """Tag every array in ``x`` with ``name`` so a policy can save (or offload) it by name.

    >>> import haliax_lite as hax
    >>> hax.tree_checkpoint_name(hax.ones(hax.Axis("a", 2)), "h").shape
    {'a': 2}
    """

    def tag(leaf):
        if isinstance(leaf, NamedArray):
            return NamedArray(checkpoint_name(leaf.array, name), leaf.axes)
        if isinstance(leaf, jax.Array):
            return checkpoint_name(leaf, name)
        return leaf

    return jax.tree_util.tree_map(tag, x, is_leaf=is_named_array)


@functools.cache
def host_offload_supported() -> bool:
    """Whether the default device has pinned host memory to offload saved values to."""
    try:
        return any(m.kind == "pinned_host" for m in jax.devices()[0].addressable_memories())
    except (AttributeError, RuntimeError):
        return False


@dataclasses.dataclass(frozen=True)
class ScanCheckpointPolicy:
    """What a scanned block saves for its backward pass (Haliax's fields and defaults).

    ``save_carries``/``save_inputs``: keep the block's carry / its other inputs (``"offload"``: keep them in
    host memory; False: recompute them). ``save_block_internals``: True keeps everything else too, a list
    keeps the values tagged (``hax.tree_checkpoint_name``) with those names. ``offload_block_internals``:
    names to keep in host memory (kept on device where the backend has no host memory). ``simple``: plain
    ``jax.checkpoint``. ``disable``: no checkpointing. ``nested``: True or a number of outer groups for a
    two-level scan.

    >>> ScanCheckpointPolicy.from_bool_or_str("nested").nested
    True
    >>> ScanCheckpointPolicy(save_block_internals=["sin"]).save_block_internals  # lists become hashable
    ('sin',)
    """

    save_carries: bool | Literal["offload"] = True
    save_inputs: bool | Literal["offload"] = False
    save_block_internals: bool | tuple[str, ...] | list[str] = False
    offload_block_internals: tuple[str, ...] | list[str] = ()
    prevent_cse: bool = False
    disable: bool = False
    simple: bool = False
    nested: bool | int = False

    def __post_init__(self):
        for field in ("save_carries", "save_inputs"):
            if getattr(self, field) not in (True, False, "offload"):
                raise ValueError(f"ScanCheckpointPolicy.{field} must be a bool or 'offload'")
        if not isinstance(self.nested, bool) and (not isinstance(self.nested, int) or self.nested < 1):
            raise ValueError(f"ScanCheckpointPolicy.nested must be a bool or an int >= 1, got {self.nested}")
        if not isinstance(self.save_block_internals, bool):
            object.__setattr__(self, "save_block_internals", tuple(self.save_block_internals))
        object.__setattr__(self, "offload_block_internals", tuple(self.offload_block_internals))
        if self.save_block_internals is True and self.offload_block_internals:
            raise ValueError(
                "ScanCheckpointPolicy: save_block_internals=True keeps every internal on device, so "
                f"offload_block_internals={self.offload_block_internals} cannot apply; list the names to save"
            )

    @staticmethod
    def from_bool_or_str(remat: ScanCheckpointSpec) -> ScanCheckpointPolicy:
        """As Haliax: ``True``: plain ``jax.checkpoint`` of each block (``simple``); ``False``/None: no remat;
        ``"recompute"``/``"full"``/``"save_nothing"``: keep nothing; ``"save_all"``: keep everything;
        ``"nested"``: two-level sqrt(N) scan; ``"offload"``: carries and inputs to host memory."""
        if isinstance(remat, ScanCheckpointPolicy):
            return remat
        if remat is True:
            return ScanCheckpointPolicy(simple=True)
        if remat is False or remat is None:
            return ScanCheckpointPolicy(save_inputs=True, save_block_internals=True, disable=True)
        if remat in ("recompute", "full", "save_nothing"):
            return ScanCheckpointPolicy(save_carries=False, save_inputs=False)
        if remat == "save_all":
            return ScanCheckpointPolicy(save_inputs=True, save_block_internals=True)
        if remat == "nested":
            return ScanCheckpointPolicy(nested=True)
        if remat == "offload":
            return ScanCheckpointPolicy(save_carries="offload", save_inputs="offload")
        raise ValueError(f"Unknown remat {remat!r}: use a bool, a ScanCheckpointPolicy or {_STRING_POLICIES}")

    def jax_policy(self, carry_name: str, input_name: str):
        """The ``jax.checkpoint`` policy function, or None to keep only the checkpointed function's inputs."""
        if self.simple:
            return None
        save, offload, recompute = [], list(self.offload_block_internals), []
        for flag, name in ((self.save_inputs, input_name), (self.save_carries, carry_name)):
            (offload if flag == "offload" else save if flag else recompute).append(name)
        internals = self.save_block_internals
        if internals is not True:
            save.extend(internals or ())
        if offload:
            if host_offload_supported():
                return jax.checkpoint_policies.save_and_offload_only_these_names(
                    names_which_can_be_saved=save,
                    names_which_can_be_offloaded=offload,
                    offload_src="device",
                    offload_dst="pinned_host",
                )
            return jax.checkpoint_policies.save_only_these_names(*save, *offload)
        if internals is True:  # everything but what is to be recomputed (named saves are included)
            return jax.checkpoint_policies.save_anything_except_these_names(*recompute)
        return jax.checkpoint_policies.save_only_these_names(*save) if save else None

    def checkpoint(self, carry_name: str, input_name: str, fn):
        """``fn(carry, inputs)`` wrapped so its carry and inputs carry the given names under this policy."""
        if self.disable:
            return fn

        def named_fn(carry, inputs):
            return fn(tree_checkpoint_name(carry, carry_name), tree_checkpoint_name(inputs, input_name))

        policy = self.jax_policy(carry_name, input_name)
        return jax.checkpoint(named_fn, policy=policy, prevent_cse=self.prevent_cse)


ScanCheckpointSpec = ScanCheckpointPolicy | bool | str | None
"""What ``remat=`` accepts: a policy, a bool, or one of the strings of ``from_bool_or_str``."""
