"""Derive independent 64-bit keys from one seed by purpose, without JAX.

The trainer folds its JAX key the same way in spirit (`fold_in` by purpose, then by step); here a keyed
hash does it so that the datastore gives the same numbers on every host and in every framework.
"""

import hashlib


def derive_key(key: int, *path: int | str) -> int:
    """A 64-bit key that depends on `key` and each element of `path`, in order.

    >>> derive_key(0, "shuffle", 3) == derive_key(0, "shuffle", 3) != derive_key(0, "shuffle", 4)
    True
    """
    text = ":".join([str(int(key))] + [f"{type(p).__name__}={p}" for p in path])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
