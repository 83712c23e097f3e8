"""`python -m meltemi.datastore`: see `meltemi.datastore.cli`."""

import sys

from meltemi.datastore.cli import main

if __name__ == "__main__":
    sys.exit(main())
