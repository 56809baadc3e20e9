"""``python -m logitjudge.cli ...`` = ``logitjudge ...``."""

import sys

from logitjudge.cli import main

sys.exit(main())
