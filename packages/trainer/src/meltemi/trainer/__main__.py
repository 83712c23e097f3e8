"""``python -m meltemi.trainer``: see :mod:`meltemi.trainer.cli`."""

import sys

from meltemi.trainer.cli import main

sys.exit(main())
