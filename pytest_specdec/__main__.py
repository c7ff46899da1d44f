"""``python -m pytest_specdec COMMAND ...``: the ``pytest-specdec`` command."""

import sys

from .cli import main

sys.exit(main())
