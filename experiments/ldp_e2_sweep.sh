#!/usr/bin/env bash
# E2 sweep (spec ldp §6.2): experiments/ldp_e2_scaling_L.toml at L_T in {2, 4, 8, 16, 32}, each
# with its theory window ceil(sqrt(4 e T / (L_T + 4))), T = 1e6. Usage:
#   experiments/ldp_e2_sweep.sh OUT [dpbandits binary] [extra run flags, e.g. --runs 20]
# Writes OUT/L<L>/ (each a full results folder) and OUT/e2.csv (L, label, R(T), s.e.).
set -euo pipefail
OUT=$1; BIN=${2:-dpbandits}; shift $(( $# >= 2 ? 2 : 1 ))
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
echo "L,window,label,regret,sem" > "$OUT/e2.csv"
for L in 2 4 8 16 32; do
    W=$(python3 -c "import math; print(math.ceil(math.sqrt(4 * math.e * 1e6 / ($L + 4))))")
    sed -e "s/segments = 8,/segments = $L,/" -e "s/^window = 952/window = $W/" \
        experiments/ldp_e2_scaling_L.toml > "$OUT/L$L.toml"
    "$BIN" run "$OUT/L$L.toml" --quiet --out "$OUT/L$L" "$@"
    python3 - "$OUT/L$L/summary.csv" "$L" "$W" >> "$OUT/e2.csv" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]))]
T = max(int(r["t"]) for r in rows)
for r in rows:
    if int(r["t"]) == T:
        print(f'{sys.argv[2]},{sys.argv[3]},"{r["label"]}",{float(r["mean"]):.1f},{float(r["sem"]):.1f}')
PY
done
cat "$OUT/e2.csv"
