"""meltemi.datastore: a deterministic random-access token store in Zarr v3.

It returns numpy arrays and never imports JAX, so it serves any framework (PyTorch included).
"""

__version__ = "0.1.0"
