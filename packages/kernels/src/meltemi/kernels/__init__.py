"""meltemi.kernels: flash attention and fused cross-entropy for JAX, in Pallas and plain JAX.

Plain arrays in and out, so any JAX model can use them.
"""

__version__ = "0.1.0"
