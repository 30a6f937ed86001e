#!/usr/bin/env bash
# One step of `make demo` / `make install` that shows it is alive:
#   tools/step.sh "what it does" "how long it takes" COMMAND ARGS...
# prints "==> what it does (how long it takes)", runs COMMAND with its output in a log, and
# every 10 s prints the time so far and the log's last line (pip's "Collecting onnx ...");
# then "done in N s", or, when COMMAND fails, the end of the log and its exit status.
set -u
what=$1
estimate=$2
shift 2
start=$(date +%s)
echo "==> $what ($estimate)"
log=$(mktemp "${TMPDIR:-/tmp}/torchinspect-step.XXXXXX")
trap 'rm -f "$log"' EXIT
"$@" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; rm -f "$log"; exit 130' INT TERM
while kill -0 "$pid" 2>/dev/null; do
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    sleep 1
    kill -0 "$pid" 2>/dev/null || break 2
  done
  last=$(tail -n 1 "$log" 2>/dev/null | tr -d '\r' | cut -c 1-60)
  echo "    ... $(( $(date +%s) - start )) s${last:+: $last}"
done
wait "$pid"
status=$?
if [ "$status" -ne 0 ]; then
  tail -n 40 "$log"
  echo "==> failed (exit $status): $what"
  exit "$status"
fi
echo "    done in $(( $(date +%s) - start )) s"
