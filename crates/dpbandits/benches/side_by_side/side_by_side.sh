#!/usr/bin/env bash
# Side by side: one run of T = 1e7 rounds, K = 5 Bernoulli arms (0.75 .. 0.25), in dpbandits
# (the `one_run` example, release build, episode mode: exact block commitments where the policy
# has them) and in a straightforward numba @njit loop (JIT excluded), for UCB1, kl-UCB and
# Thompson sampling. Prints each time (median of REPEATS runs, different seeds) and the ratio
# numba / dpbandits. The numba loop is installed from PyPI into a throwaway venv.
#
#   crates/dpbandits/benches/side_by_side/side_by_side.sh [T] [K] [REPEATS]
#
# Environment: VENV (default: a fresh temporary venv, deleted afterwards; set it to reuse one),
# CARGO_TARGET_DIR (as for cargo).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
T="${1:-1e7}"
K="${2:-5}"
REPEATS="${3:-3}"
cleanup=""
if [ -z "${VENV:-}" ]; then
    VENV="$(mktemp -d)/venv"
    cleanup="$(dirname "$VENV")"
    trap 'rm -rf "$cleanup"' EXIT
fi
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q numba numpy
fi
cd "$root"
cargo build -q --release -p dpbandits --example one_run
bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/one_run"
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '%-10s %12s %12s %10s %12s\n' policy dpbandits_s numba_s ratio decisions
for p in ucb1 kl_ucb thompson; do
    ours=$(for s in $(seq 1 "$REPEATS"); do "$bin" "$p" "$K" "$T" episodes "$s"; done)
    d=$(echo "$ours" | awk '{print $5}' | median)
    dec=$(echo "$ours" | awk '{print $6}' | median)
    n=$("$VENV/bin/python" "$here/numba_loop.py" "$p" "$K" "$T" "$REPEATS" | awk '{print $5}')
    printf '%-10s %12s %12s %9.1fx %12s\n' "$p" "$d" "$n" "$(echo "$n / $d" | bc -l)" "$dec"
done
