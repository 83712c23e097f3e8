"""A run's data: the stores and corpora a config names, resolved once and opened, and the run's own copy of
its tokenizer."""
