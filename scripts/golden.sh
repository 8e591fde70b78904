#!/usr/bin/env bash
# Rewrites crates/vramfit-core/tests/golden/estimates.txt from the current code. Run it only
# when a change of numbers is meant, and say in the commit why they moved.
set -euo pipefail
cd "$(dirname "$0")/.."
VRAMFIT_WRITE_GOLDEN=1 cargo test -p vramfit-core --locked --test golden -- --exact estimates_match_the_golden_file
git diff --stat -- crates/vramfit-core/tests/golden/estimates.txt
