"""`python -m tag.cli` runs the `tag` console script."""

import sys

from tag.cli import main

sys.exit(main())
