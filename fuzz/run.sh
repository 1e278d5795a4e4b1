#!/bin/sh
# fuzz/run.sh NAME SECONDS - run build/fuzz/fuzz_NAME for SECONDS from the seed corpus
# fuzz/corpus/NAME and print one line: executions, exec/s, coverage. New interesting inputs go to
# build/fuzz/corpus-NAME (the checked-in seeds are only read), a crashing input to
# build/fuzz/NAME-crash-*, the full log to build/fuzz/NAME.log. Exits non-zero on any finding.
set -u
name=$1 seconds=$2
cd "$(dirname "$0")/.."
bin=build/fuzz/fuzz_$name log=build/fuzz/$name.log
mkdir -p "build/fuzz/corpus-$name"
dict=""
[ -f "fuzz/$name.dict" ] && dict="-dict=fuzz/$name.dict"
# -close_fd_mask=3: the target's own stdout/stderr (usage errors the cli target provokes) are
# closed; libFuzzer and the sanitizers keep reporting. -timeout: an input running 10 s is a hang.
# -rss_limit_mb: absurd memory for one input is a finding too.
if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -close_fd_mask=3 \
        -print_final_stats=1 -artifact_prefix="build/fuzz/$name-" $dict \
        "build/fuzz/corpus-$name" "fuzz/corpus/$name" >"$log" 2>&1; then
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(echo "$done_line" | sed -n 's/.*cov: \([0-9]*\) ft: \([0-9]*\).*/cov \1, ft \2/p')
    runs=$(echo "$done_line" | sed -n 's/^#\([0-9]*\).*/\1/p')
    echo "fuzz $name: ${seconds} s, $runs runs, $rate exec/s, $cov, 0 crashes"
else
    tail -n 60 "$log"
    echo "fuzz $name: FAILED, see $log and build/fuzz/$name-*" >&2
    exit 1
fi
