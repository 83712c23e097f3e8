"""meltemi.trainer: a reproducible, config-driven LLM pretraining loop composed from the Meltemi libraries."""

__version__ = "0.1.0"
