# Glue: the checks before anything starts, the matrix's jobs, the run's lifecycle. The
# logic lives in splitbench/workflow/ (preflight, jobs, snakemake_internals).
import atexit
import os
import sys

from splitbench.contracts import results
from splitbench.infra import archive, reaper, teardown, turns
from splitbench.links import lab
from splitbench.matrix import plan
from splitbench.report import contents
from splitbench.workflow import doctor, jobs, preflight, snakemake_internals

# Snakemake's own start-up (the DAG, the doctor's checks) is CPU another run's
# measurement on this machine would count: it waits for that run's job, and holds this
# machine's turn lock shared until its own jobs begin (onstart).
STARTUP_HOLD = (
    None if snakemake_internals.in_cluster_job(sys.argv) else turns.hold_this_machine()
)
preflight.merged_config(config, workflow)
# The typed config (splitbench/configuration): every planning function and rule reads it.
CONFIG = preflight.checked(config)

EXECUTION = preflight.Execution.of(workflow)
snakemake_internals.register_resources(
    workflow, preflight.pair_slots(CONFIG, EXECUTION, lab.is_root())
)

JOBS = jobs.Jobs(CONFIG, EXECUTION)
SETUP_PRIORITY = JOBS.setup_priority
as_json = jobs.as_json
splitbench = jobs.splitbench_command
pair_job = JOBS.pair_job
models_named = JOBS.models_named
all_link_results = JOBS.link_results
all_launch_records = JOBS.launch_records
all_cell_results = JOBS.cell_results
all_request_results = JOBS.request_results
all_roundtrip_results = JOBS.roundtrip_results
all_anchor_results = JOBS.anchor_results
all_toolchain_records = JOBS.toolchain_records
roundtrip_targets = JOBS.roundtrip_targets
anchor_inputs = JOBS.anchor_inputs
reference_link_result = JOBS.reference_link_result
sweep_link_result = JOBS.sweep_link_result
model_file = JOBS.model_file
backend_toolchain = JOBS.backend_toolchain
own_toolchains = JOBS.own_toolchains
own_formats = JOBS.own_formats
cell_epoch = JOBS.cell_epoch
block_priority = JOBS.block_priority
launch_priority = JOBS.launch_priority
anchor_priority = JOBS.anchor_priority


envvars:
    "PATH",


# Every stage runs `python -m splitbench ...` with the interpreter that runs this
# workflow (the project's venv), even when the venv is not activated.
os.environ["PATH"] = os.pathsep.join(
    [os.path.dirname(sys.executable), os.environ.get("PATH", "")]
)


wildcard_constraints:
    pair="[a-z0-9][a-z0-9_-]*",
    link="[a-z0-9][a-z0-9_-]*",
    model="[A-Za-z0-9][A-Za-z0-9._-]*",
    ctx="[a-z0-9]+",
    conc="[0-9]+",
    workers="[0-9]+",
    when="start|end",


# A pair's cluster job (profiles/slurm) ends when its runner, the Snakemake process that
# runs the pair's jobs one after another, exits; SLURM then kills whatever is left, but
# not host B's workers or the namespaces. Snakemake runs no hooks in cluster jobs, so the
# runner tears the pair down as it exits (a cancelled job: the job's reaper does).
if snakemake_internals.in_cluster_job(sys.argv):
    atexit.register(reaper.end_of_job)


# Servers, relays and namespaces outlive single jobs; stop them when the run ends,
# however it ends (the reaper covers Ctrl-C and kill -9 of Snakemake).
onstart:
    # The doctor's checks come first, printed: a pair with a ✗ still runs (and fails as
    # a result), but its fix is on screen before any server starts.
    doctor.before_run(CONFIG, EXECUTION.cluster)
    reaper.start_reaper(os.getpid(), locks=snakemake_internals.own_locks(workflow))
    # Measurements from before the archive existed are kept too, before any re-run.
    archive.keep_existing("results")
    JOBS.record_order()
    if STARTUP_HOLD is not None:
        turns.let_go(STARTUP_HOLD)


onsuccess:
    teardown.teardown()


onerror:
    teardown.teardown()
