#!/usr/bin/env bash
# Compares the estimator's speed with another revision's, in the same run:
#   scripts/bench-core-vs.sh REV
# builds `cargo bench -p vramfit-core` at REV (in a temporary worktree) and at the working tree,
# then prints each one's timings and, where valgrind is installed, the instructions each bench
# run executes (deterministic, unlike time on a shared machine) and their ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/bench-core-vs.sh REV}
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/tree" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add -q --detach "$tmp/tree" "$rev"
build() { # dir target -> absolute path of the bench executable
    local path
    path=$(cd "$1" && CARGO_TARGET_DIR="$2" cargo bench -p vramfit-core --no-run --locked 2>&1 |
        sed -n 's/.*Executable benches\/estimate.rs (\(.*\))/\1/p' | tail -n 1)
    (cd "$1" && realpath "$path")
}
anchor=$(build "$tmp/tree" "$PWD/target/bench-anchor")
current=$(build "$PWD" "$PWD/target")
for name in anchor current; do
    bin=${!name}
    echo "== $name"
    (cd crates/vramfit-core && "$bin" > "$tmp/$name.txt")
    head -n 2 "$tmp/$name.txt"
done
if command -v valgrind >/dev/null; then
    count() {
        (cd crates/vramfit-core && valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1" 2>&1 >/dev/null) |
            sed -n 's/.*refs: *//p' | tr -d ,
    }
    a=$(count "$anchor"); c=$(count "$current")
    echo "instructions: anchor $a, current $c, current/anchor $(awk "BEGIN { printf \"%.3f\", $c / $a }")"
else
    echo "valgrind not installed: no instruction counts"
fi
