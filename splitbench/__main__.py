"""`python -m splitbench <command>`: see splitbench.cli."""

import sys

from splitbench.infra import turns

# Before the command's imports: a job's start-up is CPU another run's measurement
# would count (infra/turns.py).
with turns.job_turn(sys.argv[1:]):
    from splitbench.cli import main

    code = main()
sys.exit(code)
