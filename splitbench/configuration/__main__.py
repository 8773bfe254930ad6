"""python -m splitbench.configuration [--check]: regenerate config/schema.yaml and
config/README.md (see reference.py)."""

import sys

from splitbench.configuration.reference import main

sys.exit(main())
