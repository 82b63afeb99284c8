#!/usr/bin/env bash
# The GPU check of issue 25 as one command that fits a 10-minute lease (about 8 minutes):
#   1. the CUDA tests (the captured graph and the captured compiled step against eager CUDA and
#      against the CPU; the drivers' `device` reaching `fit`), 2. benchmarks/graph_speed.py (ms
#      per step, eager against the graph and the compiled graph, B = 100 ... 1e5), 3. benchmarks/gpu_profile.py (the `paper` profile with the
#      build's scheduling). If the graph tests fail, the profile runs with ATTNSVM_CUDA_GRAPH=0
#      and says so.
#
# On a lent machine without Jupyter or a registry: the wheels of the library's solvers in .whl/
# (README "Running on a GPU") and ../shared/tools/nbexec.py copied to shared/tools/.
#
# Usage: bash benchmarks/gpu_check.sh OUTDIR [PROFILE_LIMIT_S] [PROFILE_DEADLINE_S] [GPU_WORKERS_PER_CARD]
# Budget (one H200, 2026-11-27): tests ~70 s, the compiled tests and graph_speed (compiles) up
# to 150 s each, then the profile LIMIT + DEADLINE: `... OUT 180 90` fits a 600 s command.
set -u
OUTDIR=${1:-/tmp/gpu-check}
LIMIT=${2:-300}
DEADLINE=${3:-120}
PER_CARD=${4:-1}
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/attnsvm-site .whl/*.whl || { echo "gpu_check: wheel install failed"; exit 1; }
    export PYTHONPATH=/tmp/attnsvm-site:$PWD/lib${PYTHONPATH:+:$PYTHONPATH}
else
    export PYTHONPATH=$PWD/lib${PYTHONPATH:+:$PYTHONPATH}
fi
t0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
stamp "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import sys, torch, numpy, cvxpy; print(sys.version.split()[0], 'torch', torch.__version__, 'numpy', numpy.__version__, 'cvxpy', cvxpy.__version__, 'cuda', torch.cuda.is_available())"

stamp "1. CUDA tests"
timeout 150 python3 -m pytest -q -n 0 -p no:cacheprovider tests/test_graph.py tests/test_driver_devices.py tests/test_records.py tests/test_span.py \
    2>&1 | tee "$OUTDIR/cuda_tests.txt" | tail -25
if ! grep -q " passed" "$OUTDIR/cuda_tests.txt" || grep -qE "[0-9]+ (failed|error)" "$OUTDIR/cuda_tests.txt"; then
    echo "gpu_check: the CUDA tests did not all pass: the profile runs with ATTNSVM_CUDA_GRAPH=0"
    export ATTNSVM_CUDA_GRAPH=0
fi

stamp "1b. the compiled step on CUDA (reported only: the profile runs engine=auto)"
timeout 150 python3 -m pytest -q -n 0 -p no:cacheprovider tests/test_compiled.py -k cuda \
    2>&1 | tee "$OUTDIR/compiled_tests.txt" | tail -8

stamp "1c. compute ops per step of each rule (benchmarks/op_count.py: torch.profiler, the count of benchmarks/step_speed.py)"
timeout 120 python3 benchmarks/op_count.py --device cuda 2>&1 | tee "$OUTDIR/op_count.txt" | grep -v "^USDT"

stamp "1d. one fit call per experiment against one per optimizer (benchmarks/one_call.py)"
timeout 90 python3 benchmarks/one_call.py --device cuda --steps 300 --repeat 2 2>&1 | tee "$OUTDIR/one_call.txt"

stamp "2. graph_speed"
timeout 150 python3 benchmarks/graph_speed.py --steps 400 --repeats 2 2>&1 | tee "$OUTDIR/graph_speed.txt"

stamp "3. gpu_profile (limit ${LIMIT} s, deadline ${DEADLINE} s, ${PER_CARD} GPU worker(s) per card)"
# the notebooks never finished at paper size first, so that they get the GPU workers first
ORDER="ch03_regpath ch09_rates ch16_ntp_attention ch10_sparsity ch07_beyond ch11_joint ch15b_ntp_geometry
ch01_separable ch13_geometry_linear ch14_geometry_attention ch15_ntp ch08_global ch06_prompt
ch04c_overparam ch05_kq_nuclear ch04b_local ch04a_trajectories ch02_attsvm"
ATTNSVM_GPU_WORKERS_PER_CARD=$PER_CARD timeout $(( LIMIT + DEADLINE + 60 )) python3 benchmarks/gpu_profile.py \
    --limit "$LIMIT" --deadline "$DEADLINE" --only $ORDER --json "$OUTDIR/gpu_profile.json" \
    2>&1 | tee "$OUTDIR/gpu_profile.txt"
stamp "done"
