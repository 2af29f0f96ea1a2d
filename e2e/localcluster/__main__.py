"""`python3 -m localcluster up|down|status|binaries` (run from e2e/ or with it on PYTHONPATH)."""

import sys

from localcluster.cli import main

sys.exit(main())
