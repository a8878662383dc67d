#!/usr/bin/env bash
# What a GPU lease needs and its machine cannot fetch (it has no network), in .devcarry/ (ignored
# by git, named in the device tool's `carry`):
#   benchmarks/device_carry.sh [PYKT_MODELS_DIR] [DATA_ROOT]
# - .devcarry/site: pykt-toolkit 0.0.38 (pip --no-deps --target; put it on PYTHONPATH there);
# - .devcarry/pykt-src-models: a checkout's pykt/models (bench_peers --pykt-src), if given;
# - .devcarry/data: the datasets under DATA_ROOT (default ../shared/data), about 21 MB.
# Then, in one device call (docs/gpu.md, "A lease, step by step"), with carry [".devcarry"] (and the
# study's checkpoints, runs/checkpoints/STUDY):
#   benchmarks/device_lease.sh 390 140 STUDY --models A B --workers 6
# The device's python3 has torch and the scientific stack; the script puts the repository root
# and .devcarry/site on PYTHONPATH (benchmarks/ import kt_lib, which is not installed there).
set -euo pipefail
cd "$(dirname "$0")/.."
out=.devcarry
models=${1:-}
data=${2:-../shared/data}
mkdir -p "$out/site" "$out/data" .git/info
grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> .git/info/exclude
python3 -m pip install --quiet --no-deps --target "$out/site" pykt-toolkit==0.0.38
if [ -n "$models" ]; then
    [ -f "$models/utils.py" ] || { echo "$models: not a pykt/models folder (no utils.py)" >&2; exit 2; }
    rm -rf "$out/pykt-src-models" && cp -r "$models" "$out/pykt-src-models"
fi
for d in "$data"/*/; do
    cp -r "$d" "$out/data/"
done
du -sh "$out"
