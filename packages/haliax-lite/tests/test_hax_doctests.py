"""Every public module keeps a runnable example; the root pytest options run them (--doctest-modules)."""

import doctest
import importlib

import pytest

MODULES = (
    "haliax_lite axis core broadcast creation dot einsum einops_syntax elementwise reductions ops shape_ops "
    "indexing random hof checkpoint partitioning tree_util unary binary array_ops fourier unique_bits "
    "state_dict state_dict_export quantization quantized_ops serialization named_array_methods axes_spec "
    "jax_utils util poly field haxtyping debug nn nn.activations "
    "nn.attention nn.conv nn.dropout nn.embedding "
    "nn._inputs nn.linear nn.loss nn.mlp nn.moe_linear nn.normalization nn.pooling nn.scan nn.scan_protocols"
).split()


@pytest.mark.parametrize("name", MODULES)
def test_the_module_has_a_runnable_example(name):
    module = importlib.import_module(name if name == "haliax_lite" else f"haliax_lite.{name}")
    assert any(test.examples for test in doctest.DocTestFinder().find(module)), f"{name} has no example"
