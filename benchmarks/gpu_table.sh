#!/usr/bin/env bash
# The GPU table of issue 28 (item 4), ready for the few minutes a lent device machine gives.
#
# Three phases, each sized for one device call of at most 10 minutes. The lent time is 15 minutes per
# task, machine start (1-2 min) included, so one session fills one or two phases: hpf first, then psm
# (the issue's aim: both under 1 s per sweep at 1e8), rest when a later session has a device.
#   hpf   HPF CAVI (K 50) at 1e7 and 1e8 nonzeros
#   psm   PSM (K 50) at 1e7 and 1e8 pairs
#   rest  every other solver at 1e7 nonzeros (K 50)
# Generating the 1e8 Netflix-shaped matrix takes ~270 s of one CPU core (measured on the 2-core machine);
# it is cached under /tmp/factorbayes-scale-cache, which a warm machine keeps for the next call.
# Every run is one child of benchmarks/bench_scale.py (seconds per sweep, first sweep with compilation,
# peak host RSS per phase, the device's peak bytes in use); the table lands in OUTDIR/scale_bench_<phase>.md
# and .json, the children's logs in OUTDIR/scale_logs/ (OUTDIR=$OUT on the device: what is under it comes back).
#
# On the device machine (repo root; its image has JAX with CUDA, NumPyro, SciPy, pandas, xarray, h5py;
# carry wheels for anything else the import check below names):
#   bash benchmarks/gpu_table.sh hpf "$OUT"     (then psm, then rest)
# Dry run on any CPU machine (tiny sizes, same code path, about 3 minutes on 2 cores):
#   for p in hpf psm rest; do GPU_TABLE_DRY=1 bash benchmarks/gpu_table.sh $p /tmp/gpu-dry; done
set -euo pipefail
PHASE=${1:?usage: gpu_table.sh hpf|psm|rest [OUTDIR]}
OUTDIR=${2:-/tmp/factorbayes-gpu}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
PY=${PYTHON:-$( [ -x "$REPO/.venv/bin/python" ] && echo "$REPO/.venv/bin/python" || echo python3 )}
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$OUTDIR"

# what the benchmark imports, checked before any device time goes to a run that cannot start
"$PY" - <<'PY'
import importlib, sys
missing = [m for m in ("jax", "numpyro", "scipy", "pandas", "xarray", "h5py", "arviz", "tqdm")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_table: missing Python packages {missing}: carry them as wheels (device README)")
import jax
print("gpu_table: jax", jax.__version__, "devices", jax.devices(), flush=True)
PY

case "$PHASE" in
  hpf)  SOLVERS="hpf"; NNZ="1e7 1e8"; LIMIT=480 ;;
  psm)  SOLVERS="psm"; NNZ="1e7 1e8"; LIMIT=480 ;;
  rest) SOLVERS="hpf-gibbs sbmf bpmf mcmc-fm vbfm ovbfm sgd-fm sibm-svi rg bpr npfm ppfm"; NNZ="1e7"; LIMIT=60 ;;
  *) echo "gpu_table: phase must be hpf, psm or rest, got $PHASE" >&2; exit 2 ;;
esac
SHAPE=()
if [ "${GPU_TABLE_DRY:-0}" = 1 ]; then
  NNZ="1e4"; SHAPE=(--n-users 2000 --n-items 500); K=8; LIMIT=300
else
  K=50
fi
# shellcheck disable=SC2086
"$PY" "$HERE/bench_scale.py" --solvers $SOLVERS --nnz $NNZ --K "$K" "${SHAPE[@]}" --steps 3 \
  --time-limit "$LIMIT" --out "$OUTDIR" --tag "_$PHASE"
