#!/usr/bin/env bash
# `make demo`: the build_snapshot DAG end to end with `airflow dags test` and the mpiexec backend on
# the bundled sample (real Airflow, real MPI, no cluster), then a short torchrun training run that
# reads the new snapshot. Prints where the snapshot and its report are; the last line is
# `snapshot_id sha256:...`.
#   DEMO_OUT (default demo-out)  DEMO_RANKS (default 2)  DEMO_STEPS (default 20)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${DEMO_OUT:-demo-out}"
BIN="$ROOT/.venv/bin"

mkdir -p "$OUT"
"$BIN/corpus" demo --input sample --out "$OUT/build" --ranks "${DEMO_RANKS:-2}" | tee "$OUT/summary.txt"
snapshot_line="$(tail -n 1 "$OUT/summary.txt")"

echo "training: torchrun --nproc-per-node 2 examples/train.py (${DEMO_STEPS:-20} steps) on $OUT/build/snapshot"
rm -rf "$OUT/train-ckpt"
"$BIN/torchrun" --nproc-per-node 2 --master-port "${DEMO_MASTER_PORT:-29533}" examples/train.py \
  --snapshot "$OUT/build/snapshot" --ckpt "$OUT/train-ckpt" --steps "${DEMO_STEPS:-20}" --save-every 10 \
  > "$OUT/train.log" 2>&1 || { tail -n 30 "$OUT/train.log"; echo "demo: training failed (log: $OUT/train.log)" >&2; exit 1; }
tail -n 3 "$OUT/train.log"
echo "training log $OUT/train.log, checkpoint $OUT/train-ckpt"
echo "$snapshot_line"
