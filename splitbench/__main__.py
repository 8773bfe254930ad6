"""`python -m splitbench <command>`: see splitbench.cli."""

import sys

from splitbench.cli import main

sys.exit(main())
