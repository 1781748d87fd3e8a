"""``python -m sarek``: the command line (``sarek.cli``)."""

import sys

from sarek.cli import main

sys.exit(main())
