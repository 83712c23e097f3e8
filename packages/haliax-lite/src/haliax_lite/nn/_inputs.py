"""The input check every channel-mapping layer (``Conv``, ``ConvTranspose``, ``MoELinear``) makes."""

from __future__ import annotations

from collections.abc import Sequence

from haliax_lite import _namespace as hax


def check_layer_input(
    inputs: hax.NamedArray, In: hax.Axis, Out: hax.Axis, where: str, also_needed: Sequence[str] = ()
) -> None:
    """Raise a ``ValueError`` naming ``where`` unless ``inputs`` has ``In`` (at its size) and the
    ``also_needed`` axes, and not yet ``Out``.

    >>> import haliax_lite as hax
    >>> check_layer_input(hax.ones(hax.Axis("embed", 4)), hax.Axis("embed", 3), hax.Axis("mlp", 8), "Layer")
    Traceback (most recent call last):
    ...
    ValueError: Layer: the input's 'embed' axis has size 4, the layer expects Axis(name='embed', size=3)
    """
    missing = [name for name in (*also_needed, In.name) if name not in inputs.shape]
    if missing:
        raise ValueError(f"{where}: the input's axes {inputs.shape} lack the axes {missing} the layer needs")
    if inputs.shape[In.name] != In.size:
        raise ValueError(
            f"{where}: the input's {In.name!r} axis has size {inputs.shape[In.name]}, the layer expects {In}"
        )
    if Out.name in inputs.shape:
        raise ValueError(
            f"{where}: the input already has the output axis {Out.name!r} ({inputs.shape}); "
            "rename it (hax.rename) or give the layer another Out"
        )
