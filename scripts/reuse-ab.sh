#!/usr/bin/env bash
# --reuse-primes against fresh sessions on one running server (docs/reuse-primes.md): the 32K
# matrix of scenarios/paper.toml swept twice, fresh sessions first, for each thermal policy given;
# prints each sweep's wall time and the ratio, and leaves both runs for `bench compare`.
#
#   reuse-ab.sh URL OUT [THERMAL...]     THERMAL: off, probe (the scenario's own gate) [off probe]
#
# Environment: BENCH (the bench binary [target/release/bench]), CONTEXTS [32768], RUNS [the
# scenario's 3], EXTRA (more sweep flags, e.g. --hardware h100-sxm).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
url=${1:?usage: reuse-ab.sh URL OUT [THERMAL...]}
out=${2:?usage: reuse-ab.sh URL OUT [THERMAL...]}
shift 2
policies=("$@")
((${#policies[@]})) || policies=(off probe)
bench=${BENCH:-$ROOT/target/release/bench}
mkdir -p "$out"
for thermal in "${policies[@]}"; do
    gate=()
    [[ $thermal == probe ]] || gate=(--thermal "$thermal")
    declare -A took=()
    for mode in fresh reuse; do
        flags=(--scenario "$ROOT/scenarios/paper.toml" --contexts "${CONTEXTS:-32768}" --staggered false "${gate[@]}")
        [[ -n ${RUNS:-} ]] && flags+=(--runs "$RUNS")
        if [[ $mode == reuse ]]; then flags+=(--reuse-primes); else flags+=(--reuse-primes=false); fi
        start=$(date +%s.%N)
        # shellcheck disable=SC2086 # EXTRA is a list of flags
        "$bench" sweep --server "$url" "${flags[@]}" ${EXTRA:-} --run-id "$thermal-$mode" --out "$out" --quiet \
            || [[ $? -eq 1 ]]
        took[$mode]=$(python3 -c "import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 1))" "$(date +%s.%N)" "$start")
        echo "thermal $thermal, $mode sessions: ${took[$mode]} s" | tee -a "$out/wall.txt"
    done
    ratio=$(python3 -c "import sys; print(round(float(sys.argv[1]) / float(sys.argv[2]), 3))" "${took[reuse]}" "${took[fresh]}")
    echo "thermal $thermal: reuse / fresh = $ratio" | tee -a "$out/wall.txt"
    "$bench" compare "$out/$thermal-fresh" "$out/$thermal-reuse" >"$out/compare-$thermal.txt" || true
done
