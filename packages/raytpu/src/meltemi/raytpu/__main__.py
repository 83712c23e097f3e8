"""``python -m meltemi.raytpu status``: list slices and what runs on them."""

import sys

from meltemi.raytpu.status import main

sys.exit(main())
