"""`python -m splitbench <command>`: see splitbench.cli."""

import sys

from splitbench import commands
from splitbench.infra import turns

# Before the command's imports: a job's start-up is CPU another run's measurement
# would count (infra/turns.py).
with turns.job_turn(sys.argv[1:], commands.BY_A_RULE, commands.DRIVING):
    from splitbench.cli import main

    code = main()
sys.exit(code)
