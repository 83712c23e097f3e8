"""Downstream evaluation through EleutherAI's lm-evaluation-harness, with the JAX model itself.

- ``scoring``: the model's log-likelihoods of token continuations, batched into a few compiled shapes and
  split over the devices of a mesh (JAX only; no harness needed).
- ``model``: ``MeltemiLM``, the harness model registered as ``meltemi`` (``loglikelihood``,
  ``loglikelihood_rolling``, ``generate_until``), from a run directory, a ``step-N`` checkpoint or a model
  in memory. Needs the ``meltemi-trainer[eval]`` extra (``lm-eval``).
- ``runner``: runs harness tasks by name or task YAML path (the shipped ones in ``tasks/`` by name) and
  turns the results into ``eval/<task>/<metric>`` metrics.
- ``results_file``: where the results' JSON goes, a new file checked before any task runs.
- ``hub``: whether task data may come from the Hugging Face Hub, decided before lm-eval is imported (offline
  at once when the Hub cannot be reached).
- ``loading``: ``require_harness``, the one way in: the Hub decided, then lm-eval imported (or one error
  saying what needed it and how to install it).
- ``tasks/``: small offline tasks over held-out standard-library files, rebuilt by ``build_tasks``.
"""

SHIPPED_TAG = "meltemi_stdlib"  # the tag of every task in tasks/: apps/evaluate.py's default
