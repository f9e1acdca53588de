"""`python -m search` is the `search` command."""

import sys

from search.cli import main

sys.exit(main())
