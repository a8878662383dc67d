"""`python -m kt_lib.cli` is the `kt` command."""

import sys

from . import main

sys.exit(main())
