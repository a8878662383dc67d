"""`python -m kt_lib.reports ...`, the same as `kt report ...`."""

import sys

from . import main

sys.exit(main())
