#!/usr/bin/env bash
# Wall time of rebuilds of the quickstart, side by side with a plain crate without models.
# Prints a table of medians over N runs (default 5):
#   no-op build            nothing changed (the build script does not run)
#   touch (mtime only)     the build script reruns; the model is a cache hit, no Python starts
#   edit one model         the model's source changed: Python compiles it again
# Usage: bash scripts/bench-rebuild.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
model=examples/quickstart/models/digits.py
backup=$(mktemp)
cp "$model" "$backup"
plain=$(mktemp -d)
trap 'cp "$backup" "$model"; rm -rf "$plain" "$backup"' EXIT

mkdir -p "$plain/src"
printf '[package]\nname = "plain"\nversion = "0.1.0"\nedition = "2021"\n[workspace]\n' > "$plain/Cargo.toml"
printf 'fn main() { println!("hello"); }\n' > "$plain/src/main.rs"

now_ms() { date +%s%3N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
time_build() {  # dir, prepare-command
  local dir=$1 prepare=$2 start end
  for _ in $(seq "$runs"); do
    eval "$prepare"
    start=$(now_ms)
    (cd "$dir" && cargo build --release --quiet ${3:-})
    end=$(now_ms)
    echo $((end - start))
  done | median
}

cargo build --release --quiet -p quickstart
(cd "$plain" && cargo build --release --quiet)

qs_noop=$(time_build . ":" "-p quickstart")
plain_noop=$(time_build "$plain" ":")
qs_touch=$(time_build . "touch $model" "-p quickstart")
plain_touch=$(time_build "$plain" "touch $plain/src/main.rs")
counter=0
qs_edit=$(time_build . 'counter=$((counter+1)); cp "$backup" "$model"; echo "# edit $counter $RANDOM" >> "$model"' "-p quickstart")

printf '%-34s %12s %12s\n' "median of $runs (ms)" quickstart "plain crate"
printf '%-34s %12s %12s\n' "no-op cargo build --release" "$qs_noop" "$plain_noop"
printf '%-34s %12s %12s\n' "touch model / main.rs (mtime)" "$qs_touch" "$plain_touch"
printf '%-34s %12s %12s\n' "edit the model source" "$qs_edit" "-"
