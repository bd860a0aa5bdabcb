#!/usr/bin/env bash
# The main job: set up, build, then generate a small WebDataset (16 shards of 200 samples)
# on the fly and load it end to end with 2 ranks x 2 workers, printing the summary; then
# stop a run mid-epoch with a checkpoint and resume it on another topology.
# Usage: scripts/demo.sh [extra `shardyard run` options]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
sy_install_packages
# A release build of its own (the test script's build/ carries tests and sanitizer-free
# debug info); only the CLI and the example trainer are needed here.
mkdir -p "$SY_ROOT/build-release"
SY_TARGETS="shardyard trainer climate" sy_build "$SY_ROOT/build-release" -DCMAKE_BUILD_TYPE=Release \
  -DSHARDYARD_TESTS=OFF -DSHARDYARD_BENCHMARKS=OFF

DATA="${SY_DEMO_DIR:-$(mktemp -d /tmp/shardyard-demo.XXXXXX)}"
export SHARDYARD_CACHE_DIR="$DATA/cache"
echo "== generating a demo dataset in $DATA"
python3 "$SY_ROOT/tests/e2e/make_dataset.py" --out "$DATA/train" --shards 16 --samples 200 \
  --bytes 8192 --seed 1
echo "== shardyard run: 2 ranks x 2 workers, batch 32, 2 epochs, shuffled"
"$SY_ROOT/build-release/tools/shardyard" run --source "$DATA/train/shard-{000000..000015}.tar" \
  --ranks 2 --workers 2 --batch-size 32 --epochs 2 --shuffle --seed 17 \
  --dump-keys "$DATA/dump" "$@"
echo "== checkpoint after 20 steps at 2 ranks x 2 workers, inspect it, resume at 3 ranks x 1 worker"
SRC="$DATA/train/shard-{000000..000015}.tar"
"$SY_ROOT/build-release/tools/shardyard" run --source "$SRC" --ranks 2 --workers 2 \
  --batch-size 32 --epochs 2 --shuffle --seed 17 --checkpoint-dir "$DATA/ckpt" \
  --stop-after-steps 20 --json
"$SY_ROOT/build-release/tools/shardyard" checkpoint inspect "$DATA/ckpt" >"$DATA/ckpt.txt"
head -n 14 "$DATA/ckpt.txt"
echo "   ... (per-shard progress of all 64 logical shards in $DATA/ckpt.txt)"
"$SY_ROOT/build-release/tools/shardyard" run --source "$SRC" --ranks 3 --workers 1 \
  --batch-size 32 --epochs 2 --shuffle --seed 17 --resume "$DATA/ckpt" --json
echo "== example trainer (embeds the runtime through its public API)"
"$SY_ROOT/build-release/examples/trainer" --source "$DATA/train/shard-{000000..000015}.tar" \
  --workers 2 --batch-size 32 --epochs 1
echo "== climate example: windows over month files, one loaded month shared by 4 workers"
"$SY_ROOT/build-release/examples/climate" --workers 4 --stitch --month-mib 16
echo "== the same kind of data from the command line: broadcast dispatch, 2 ranks x 2 workers"
python3 - "$DATA/climate" <<'PY'
import os, struct, sys
os.makedirs(sys.argv[1], exist_ok=True)
for m in range(1, 7):  # six months of hourly records, 4 float32 channels
    with open(os.path.join(sys.argv[1], f"2023-{m:02d}.bin"), "wb") as f:
        f.write(b"".join(struct.pack("<4f", m, h, 0.0, 1.0) for h in range(24 * 30)))
PY
"$SY_ROOT/build-release/tools/shardyard" run --source "$DATA/climate/2023-{01..06}.bin" \
  --windows 168:24:24 --record-bytes 16 --stitch --dispatch broadcast --ranks 2 --workers 2 \
  --batch-size 16 --shuffle --seed 3 --json
echo "== demo data and per-rank key dumps are in $DATA"
