#!/usr/bin/env bash
# Line coverage of the suite (make coverage): build with gcov instrumentation into BUILD, run every
# test binary, then print the lines executed per source folder (tests/, bench/ and examples/ left
# out) and per file below a threshold. Uses gcc's gcov only (no lcov or gcovr needed).
#   scripts/coverage.sh [BUILD_DIR] [THRESHOLD_PERCENT]
set -euo pipefail
build=${1:-build-coverage}
threshold=${2:-85}
src=$(cd "$(dirname "$0")/.." && pwd)
jobs=${JOBS:-$(nproc)}
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="--coverage -DNPUSIM_COVERAGE" \
  -DCMAKE_EXE_LINKER_FLAGS="--coverage" -DCMAKE_SHARED_LINKER_FLAGS="--coverage" >/dev/null
cmake --build "$build" -j"$jobs" >/dev/null
build=$(cd "$build" && pwd)
find "$build" -name '*.gcda' -delete
status=0
ctest --test-dir "$build" -j"$jobs" --output-on-failure >"$build/coverage-ctest.log" 2>&1 || status=$?
tail -n 3 "$build/coverage-ctest.log"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# gcov over every object directory's .gcda files; its summary lines per source file
find "$build" -name '*.gcda' -printf '%h\n' | sort -u | while read -r dir; do
  (cd "$work" && gcov -n -o "$dir" "$dir"/*.gcda 2>/dev/null) || true
done >"$work/gcov.txt"
# per source file: its lines and the most of them any object ran (a file in several binaries)
awk -v src="$src/" '
  /^File / { f = $2; gsub(/\047/, "", f); next }
  /^Lines executed:/ {
    if (f == "" || index(f, src) != 1 || f !~ /\.c$/) { f = ""; next }
    rel = substr(f, length(src) + 1)
    if (rel ~ /^(tests|bench|examples)\//) { f = ""; next }
    split($2, a, "%"); pct = substr(a[1], 10) + 0; n = $4 + 0
    hit = pct * n / 100
    if (!(rel in lines) || hit > done[rel]) { lines[rel] = n; done[rel] = hit }
    f = ""
  }
  END { for (r in lines) printf "%s %d %.2f\n", r, lines[r], done[r] }' "$work/gcov.txt" | sort >"$work/files.txt"
printf '%-14s %8s %8s %7s\n' folder lines run share
awk -v thr="$threshold" '
  { d = $1; sub(/\/[^\/]*$/, "", d); tl[d] += $2; td[d] += $3; all += $2; alld += $3 }
  END {
    for (d in tl) printf "%-14s %8d %8d %6.1f%%%s\n", d, tl[d], td[d], 100 * td[d] / tl[d], 100 * td[d] / tl[d] < thr ? "  below " thr "%" : ""
    printf "~all           %8d %8d %6.1f%%\n", all, alld, 100 * alld / all
  }' "$work/files.txt" | sort | sed 's/^~all /all  /'
echo
echo "files below $threshold%:"
awk -v thr="$threshold" '$2 > 0 && 100 * $3 / $2 < thr { printf "  %-40s %6.1f%% of %d lines\n", $1, 100 * $3 / $2, $2 }' "$work/files.txt"
exit "$status"
