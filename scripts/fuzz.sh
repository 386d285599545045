#!/usr/bin/env bash
# Run every libFuzzer target of a fuzz build for SECONDS each (make fuzz FUZZ_SECONDS=N).
#   scripts/fuzz.sh BUILD_DIR SECONDS
# Each target starts from its seed corpus (tests/fuzz/corpus/<target>, plus the project's
# scenario and preset files for the scenario target) copied into BUILD_DIR/corpus/<target>, with
# a dictionary of every scenario key (npusim keys) and unit suffix. Findings land in
# BUILD_DIR/findings/; put a minimised one into tests/fuzz/corpus/<target>/ with its fix, and
# test_fuzz replays it from then on. Prints each target's executions and the total.
set -euo pipefail
build=${1:?build directory}
secs=${2:?seconds per target}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$build/corpus" "$build/findings"
dict="$build/npusim.dict"
{
  "$build/cli/npusim" keys | grep -o '`[a-z0-9_.]*`' | tr -d '`' | sort -u | sed 's/.*/"&"/'
  for t in GHz MHz Hz TBps GBps MBps Gbps GB/s KiB MiB GiB TiB B us ms ns s TFLOPS GFLOPS PFLOPS '@include' '=' ';' '{' '}' '"' 'true' 'false'; do
    printf '"%s"\n' "$t"
  done
} > "$dict"
total=0
for t in units set scenario csv nccl kineto; do
  c="$build/corpus/$t"
  mkdir -p "$c"
  cp -n "$src/tests/fuzz/corpus/$t/"* "$c/" 2>/dev/null || true
  if [ "$t" = scenario ]; then
    find "$src/scenarios" "$src/arch/presets" -name '*.cfg' | while read -r f; do cp -n "$f" "$c/$(echo "$f" | tr / _)"; done
  fi
  log="$build/fuzz_$t.log"
  ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$src/tests/lsan.supp" "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -dict="$dict" -max_len=4096 \
    -artifact_prefix="$build/findings/$t-" -print_final_stats=1 "$c" > "$log" 2>&1 || {
    echo "fuzz_$t: a finding (see $log and $build/findings/)"; tail -30 "$log"; exit 1; }
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  total=$((total + runs))
  echo "fuzz_$t: $runs executions in ${secs} s, no finding"
done
echo "fuzz: $total executions in total, no finding"
