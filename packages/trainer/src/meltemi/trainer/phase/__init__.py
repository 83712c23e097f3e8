"""Where a new phase starts: a base (another run's checkpoint or a Hugging Face directory, local or in a
bucket) located and checked against the config, its parameters restored onto the run's mesh, and the
vocabulary grown by the rows a chat template's new tokens need."""
