import sys

from splitbench.cli import main

sys.exit(main())
