"""``python -m meltemi.trainer``: see :mod:`meltemi.trainer.cli`."""

from meltemi.trainer.cli import exit_process, main

exit_process(main())
