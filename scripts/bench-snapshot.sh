#!/usr/bin/env bash
# Time and peak memory of `vramfit doctor` on a memory snapshot of any size. Not a test: run it
# by hand and paste the output into docs/doctor.md ("Big snapshots").
#
#   scripts/bench-snapshot.sh                  # 28 million trace events, about 2 GB
#   EVENTS=1000000 scripts/bench-snapshot.sh   # about 75 MB
#
# The snapshot is written by validation/snapshots/make_big_snapshot.py (Python 3, no PyTorch),
# which streams the opcodes `pickle` writes; it takes about 20 minutes for 2 GB.
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS=${EVENTS:-28000000}
FILE=${FILE:-/tmp/vramfit-snapshot-$EVENTS.pickle}
TARGET=${CARGO_TARGET_DIR:-target}

if [ ! -s "$FILE" ]; then
    python3 validation/snapshots/make_big_snapshot.py "$FILE" --events "$EVENTS"
fi
cargo build --release -q -p vramfit
BIN="$TARGET/release/vramfit"

BYTES=$(wc -c <"$FILE")
/usr/bin/time -f "%e %M" -o /tmp/vramfit-bench-snapshot.time \
    "$BIN" doctor "$FILE" --top 5 --svg /tmp/vramfit-bench-snapshot.svg >/dev/null
read -r SECONDS_TAKEN RSS_KB </tmp/vramfit-bench-snapshot.time
echo "snapshot: $EVENTS trace events, $BYTES bytes ($(awk "BEGIN {printf \"%.2f\", $BYTES / 2^30}") GiB)"
echo "vramfit doctor: ${SECONDS_TAKEN} s, peak resident memory $(awk "BEGIN {printf \"%.1f\", $RSS_KB / 1024}") MiB"
echo "throughput: $(awk "BEGIN {printf \"%.0f\", $BYTES / 2^20 / $SECONDS_TAKEN}") MiB/s (two passes)"
