"""Fine-tune a base model into a chat model: by default the tiny run (runs/tiny) on conversations about the
standard library's functions, generated offline.

    uv run apps/sft.py                                                  # runs/tiny -> runs/tiny_sft
    uv run apps/sft.py --base RUN_OR_HF_DIR --data FILE_OR_DIR_OR_URL[,...] --run-dir OUT
    uv run apps/sft.py --config configs/marin_8b_sft.yaml --dry-run     # Marin-8B-Instruct's recipe, planned

``--base`` is a run directory (its latest good checkpoint), a ``step-N`` directory or a Hugging Face
directory, local or in a bucket, or a model's Hub name in this machine's Hugging Face cache; the run starts
from its parameters with a fresh optimizer at step 0.
``--data`` is chat data: JSON Lines (one ``{"messages": [{"role": ..., "content": ...}, ...]}`` per line), a
``.json`` file of such lines or of one array of them, or Parquet or Arrow (``save_to_disk``'s) with a
``messages`` column (or TRL's ``prompt`` and ``completion``, of which only the completion is trained, or
ShareGPT's ``conversations`` of ``from``/``value`` turns, or Alpaca's ``instruction``, ``input`` and
``output``), files, directories, URLs or a data set's Hub name
in the cache, comma-separated; a data set's test split is held out. Conversations are rendered by
``data.chat.template`` (``auto``: the base's own template, else Llama 3's layout), packed whole into rows
(each with its own positions, never attending to another), and the loss is the assistant's tokens only.
This is ``python -m meltemi.trainer`` with ``configs/tiny_sft.yaml`` as its default config: ``--config`` and
every dotted override work as in ``apps/pretrain.py``, and the same progress, metrics, checkpoints, plots
and resume; the summary ends with the model's reply to ``trainer.sample_prompt`` before and after. Talk
with the result: ``apps/chat.py``.
"""

import sys
from pathlib import Path

from meltemi.trainer.cli import exit_process, main

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "tiny_sft.yaml"

if __name__ == "__main__":
    exit_process(
        main(sys.argv[1:], prog="uv run apps/sft.py", default_config=DEFAULT_CONFIG, fine_tuning=True)
    )
