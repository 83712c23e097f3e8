"""Hugging Face interop: export our Llama to a ``transformers`` directory, and import one back, on the
local disk or in a bucket alike.

``export_hf(model, dir, tokenizer=...)`` writes ``config.json``, safetensors weights, the tokenizer files
and ``generation_config.json`` (``export_target(dir)`` checks the target first, as it does);
``import_hf(dir, config)`` reads them into our model; ``train_state_from_hf(dir, run_config)`` makes a
train state to continue pretraining from them.
"""

from meltemi.trainer.hf.config_map import HfFormatError, hf_config, model_config_from_hf
from meltemi.trainer.hf.export import export_hf, export_target
from meltemi.trainer.hf.load import import_hf, read_hf_config, train_state_from_hf

__all__ = [
    "HfFormatError",
    "export_hf",
    "export_target",
    "hf_config",
    "import_hf",
    "model_config_from_hf",
    "read_hf_config",
    "train_state_from_hf",
]
