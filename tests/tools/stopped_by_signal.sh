#!/usr/bin/env bash
# Ctrl-C (SIGINT) while `memweave train` runs its second policy: the first policy's results
# and the iterations the second ran are printed and written (--json, --save of ...), the exit
# status is 130 as the signal's own would be. Before, the signal killed the run and every
# finished policy was lost (session 42's hostile run). A second signal still quits at once.
# usage: stopped_by_signal.sh MEMWEAVE OUTDIR
set -u
memweave=$1
out=$2/stopped_by_signal
rm -rf "$out" && mkdir -p "$out"
fail() { echo "FAIL: $*"; echo "--- output:"; cat "$out/log"; exit 1; }
# Waits (60 s at most: the suite runs beside other tests) until the log of the run $pid has a
# line matching $1.
wait_for() {
  for _ in $(seq 1 1200); do
    grep -q "$1" "$out/log" && return 0
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
  done
  grep -q "$1" "$out/log"
}
# Starts `memweave $1` on the small network in the background (pid), the rest of its options
# after; `signal SIG...` sends each and waits for the exit status (rc).
start() {
  "$memweave" "$1" --net resnet:1,1,1,1 --width 0.0625 --classes 5 --image-side 32 --batch 4 \
    --device host --conv-ws fixed:direct "${@:2}" >"$out/log" 2>&1 &
  pid=$!
}
signal() {
  for s in "$@"; do kill -"$s" $pid; done
  wait $pid
  rc=$?
}
# For the run started ($pid): waits for its line $2, a second more, then sends SIG$3 and
# checks the exit status $4, the row $5 in the log and the stop in the json $6 ($1 names it).
stop_when_ready() {
  wait_for "$2" || fail "$1 never started"
  sleep 1
  signal "$3"
  [ $rc -eq "$4" ] || fail "$1: exit status $rc, expected $4"
  grep -q "$5" "$out/log" || fail "$1: no row matching '$5'"
  grep -q "\"stopped_by\": \"SIG$3\"" "$6" 2>/dev/null || fail "$1: the json lacks the stop"
}
start train --iterations 150 --policy liveness,offload --json "$out/run.json"
wait_for "^offload .*iter" || fail "offload never started"
signal INT
[ $rc -eq 130 ] || fail "exit status $rc, expected 130"
grep -q "stopped by SIGINT: what finished was printed and written" "$out/log" ||
  fail "no word of the stop"
grep -q "offload: stopped by SIGINT after [0-9]* of 150 iterations" "$out/log" ||
  fail "the stopped policy's row does not say how many iterations ran"
[ -f "$out/run.json" ] || fail "--json was not written"
grep -q '"policy": "liveness"' "$out/run.json" || fail "liveness is not in the json"
grep -q '"iterations_run": 150' "$out/run.json" || fail "liveness did not run its 150"
grep -q '"stopped_by": "SIGINT"' "$out/run.json" || fail "the json does not say offload stopped"
# The same signal twice at once (`timeout` signals the child, then its process group): one
# request, not "once more to quit at once", which wrote nothing (session 43's hostile run).
start train --iterations 150 --policy liveness --json "$out/twice.json"
wait_for "^liveness .*iter" || fail "liveness never started"
signal TERM TERM
[ $rc -eq 143 ] || fail "two SIGTERMs at once: exit status $rc, expected 143"
grep -q '"stopped_by": "SIGTERM"' "$out/twice.json" 2>/dev/null ||
  fail "two SIGTERMs at once: the json was not written"
# eval: the running policy stops after its batch, its row saying how many ran (it ran all its
# batches first, and the next policy had no row; session 43's hostile run).
start eval --batches 1000000 --policy liveness,utp --json "$out/eval.json"
# Its header comes once the signals are caught (the libraries' loading, seconds on a loaded
# machine, made a fixed wait too short); then a second for the first batches.
stop_when_ready eval "^memory: forward-only" INT 130 \
  "liveness .*stopped by SIGINT after [0-9]* of 1000000 batches" "$out/eval.json"
# plan --split at a large batch: `all` weighs its split plans on the null device for seconds
# (minutes at larger batches); a stop asked meanwhile ends it there, its row saying so, rather
# than after the weighing (session 44's hostile run: 11 minutes after the first SIGTERM).
"$memweave" plan --net resnet50 --width 0.25 --classes 5 --image-side 32 --conv-ws fixed:direct \
  --split --batch 2048 --budget 200KiB --policy liveness,all --json "$out/plan.json" >"$out/log" 2>&1 &
pid=$!
stop_when_ready "plan --split" "model time: unsplit" TERM 143 \
  "all: stopped by SIGTERM before its first iteration (stopped while weighing" "$out/plan.json"
# plan --max-depth: utp's search walks to n3 = 10000 for seconds; a stop ends it at its probe,
# says so and keeps liveness's answer (the signal killed it with nothing said; session 47's
# hostile run).
"$memweave" plan --net resnet:1,1,1,1 --width 0.0625 --classes 5 --image-side 32 --batch 4 \
  --conv-ws fixed:direct --budget 16MiB --max-depth --policy liveness,utp >"$out/log" 2>&1 &
pid=$!
wait_for "^  liveness: n3 = " || fail "plan --max-depth: liveness's answer never came"
sleep 1
signal INT
[ $rc -eq 130 ] || fail "plan --max-depth: exit status $rc, expected 130"
grep -q "^  utp: stopped by SIGINT before its answer" "$out/log" ||
  fail "plan --max-depth: utp's search does not say it stopped"
grep -q "stopped by SIGINT: the answers found were printed" "$out/log" ||
  fail "plan --max-depth: no word of the stop"
# plan --policy all on a deep ResNet (4000 layers): one run of its weighing plans a schedule
# for about a minute; a stop asked meanwhile ends it within a round of the planner (it was
# asked only between the weighing's runs: 40 s after a SIGTERM here, 186 s for a --max-depth
# search; session 48's hostile run).
"$memweave" plan --net resnet:100,100,100,100 --batch 1 --budget 5GiB --policy all \
  --json "$out/deep.json" >"$out/log" 2>&1 &
pid=$!
sleep 8  # its weighing has begun (0.4 s; under ASan a few), and runs for a minute or more
asked=$(date +%s)
signal TERM
[ $rc -eq 143 ] || fail "plan of a deep ResNet: exit status $rc, expected 143"
[ $(($(date +%s) - asked)) -le 15 ] ||
  fail "plan of a deep ResNet: it stopped $(($(date +%s) - asked)) s after the SIGTERM"
grep -q "all: stopped by SIGTERM before its first iteration (stopped while" "$out/log" ||
  fail "plan of a deep ResNet: all's row does not say it stopped"
grep -q '"stopped_by": "SIGTERM"' "$out/deep.json" 2>/dev/null ||
  fail "plan of a deep ResNet: the json lacks the stop"
echo "PASS: exit 130, liveness whole, offload stopped and written; a doubled SIGTERM writes too;"\
  "eval stops after its batch; plan stops while weighing; a search stops at its probe;"\
  "a deep plan stops within a planning round"
