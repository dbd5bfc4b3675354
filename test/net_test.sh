#!/usr/bin/env bash
# Data parallel across hosts over a real (virtual) network. The hosts are Linux network
# namespaces, node1 .. nodeN at 10.213.0.1 .. 10.213.0.N/24, each joined by a veth pair to a
# bridge that lives in a namespace of its own: nothing is added to the machine's own network,
# and nothing outside these namespaces is ever contacted. Each host also has its own hostname
# (unshare --uts) and /etc/hosts (ip netns exec mounts /etc/netns/NS/hosts), as on a cluster.
#
#   net_test.sh PTUNE_EXE PYTHON CASE
#
# CASE: work   ptune launch --nnodes 2 (1 and 2 ranks per node), torchrun --nnodes 2, Slurm's
#              variables: train, eval and sweep equal the same world on one host (loopback) and
#              eval equals one process; the store and Gloo listen on the node's address only.
#       late   a node that never comes: the others fail after dist.timeout_s, naming the rendezvous.
#       linkcut  the link of node 2 goes down mid-training: both nodes fail, naming the collective.
#       kill   SIGKILL of node 2's launcher, then of a whole node, mid-training.
#       netem  5 ms delay and 1% loss on both links (tc netem; where the kernel lacks sch_netem,
#              a 400 Mbit/s token bucket instead): training completes with equal weights.
# Every fault ends with one "ptune: error:" line naming the rank, node and host, every process
# gone, within dist.timeout_s plus a few seconds. Needs root and iproute2: skipped (exit 77,
# the reason printed) without them.
set -u
EXE=${1:?usage: net_test.sh PTUNE_EXE PYTHON CASE}
PY=${2:-}
CASE=${3:?case}
TIMEOUT_S=5  # dist.timeout_s of these runs
SLACK_S=15   # "a few seconds": LibTorch process start-up (counted here) and teardown, on a loaded 2-core machine

skip() { echo "SKIP: $*"; exit 77; }
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
check() { if eval "$1"; then echo "ok: $2"; else fail "$2"; fi; }

[ "$(id -u)" = 0 ] || skip "not root: network namespaces need root (CI runs these as root)"
command -v ip >/dev/null || skip "no 'ip' command (iproute2): cannot make network namespaces"
command -v unshare >/dev/null || skip "no 'unshare' command (util-linux)"

ID=ptn$$
T=$(mktemp -d /tmp/ptune-net.XXXXXX)
NODES=()
cleanup() {
  for ns in "${NODES[@]}" "$ID-sw"; do
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  rmdir /etc/netns 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# make_hosts N: node1..nodeN on one bridge.
make_hosts() {
  ip netns add "$ID-sw" 2>"$T/netns.err" || {
    cat "$T/netns.err"
    skip "cannot create a network namespace (no CAP_SYS_ADMIN in this container?)"
  }
  ip -n "$ID-sw" link add br0 type bridge && ip -n "$ID-sw" link set br0 up || { fail "bridge"; exit 1; }
  local hosts=""
  for i in $(seq 1 "$1"); do hosts+="10.213.0.$i node$i"$'\n'; done
  for i in $(seq 1 "$1"); do
    local ns=$ID-h$i
    ip netns add "$ns" || { fail "netns $ns"; exit 1; }
    NODES+=("$ns")
    mkdir -p "/etc/netns/$ns" && printf '127.0.0.1 localhost\n%s' "$hosts" >"/etc/netns/$ns/hosts"
    ip -n "$ID-sw" link add "v$i" type veth peer name eth0 netns "$ns" &&
      ip -n "$ID-sw" link set "v$i" master br0 up &&
      ip -n "$ns" addr add "10.213.0.$i/24" dev eth0 &&
      ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || { fail "veth of $ns"; exit 1; }
  done
}

# on I CMD...: runs CMD on host I (its namespace, hostname nodeI).
on() {
  local i=$1
  shift
  ip netns exec "$ID-h$i" unshare --uts sh -c 'hostname "$0" && exec "$@"' "node$i" "$@"
}

# The tiny experiment: ResNet-18 at 16x16 on 1 CPU thread per rank, batch 4 per rank.
# write_cfg FILE MAX_STEPS
write_cfg() {
  # measure.target_ci_pct 100: a sweep row times exactly measure.repeats windows (a narrower
  # target may add windows, and the loss after them would differ between two sweeps).
  cat >"$1" <<EOF
{
  "name": "tiny", "device": "cpu", "cpu_threads": 1, "seed": 3,
  "data": {"num_samples": 4096, "image_size": 16},
  "loader": {"batch_size": 4},
  "dist": {"timeout_s": $TIMEOUT_S},
  "measure": {"warmup_steps": 1, "steps": 3, "repeats": 3, "target_ci_pct": 100},
  "train": {"epochs": 100, "max_steps": $2, "log_every": 1, "checkpoint_dir": "$T/ckpt"}
}
EOF
}

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# within A B LIMIT: whether B - A <= LIMIT seconds
within() { awk -v a="$1" -v b="$2" -v l="$3" 'BEGIN { exit !(b - a <= l) }'; }
# wait_text FILE TEXT SECONDS
wait_text() {
  local end=$((SECONDS + $3))
  while [ $SECONDS -lt $end ]; do
    grep -qF -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
# last_error FILE: the last "ptune: error:" line of a launcher's output (its own, unprefixed).
last_line() { grep -v '^\[rank' "$1" | grep 'ptune: error:' | tail -1; }
# no processes left on host I
empty() { [ -z "$(ip netns pids "$ID-h$1")" ]; }
json() { "${PY:-python3}" -c "import json,sys; d=json.load(open(sys.argv[1])); print($1)" "$2"; }
# same_weights A B: every tensor of two weight files bitwise equal (the files' zip metadata differ).
same_weights() {
  "$PY" -c 'import sys, torch
a, b = (torch.load(f) for f in sys.argv[1:])
sys.exit(not (a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)))' "$1" "$2"
}

# launch_on I NNODES NPROC PORT OUT -- ptune args: starts a node's launch in the background.
launch_on() {
  local i=$1 nnodes=$2 nproc=$3 port=$4 out=$5
  shift 6
  on "$i" "$EXE" launch --nnodes "$nnodes" --node-rank $((i - 1)) --nproc-per-node "$nproc" \
    --master-addr 10.213.0.1 --master-port "$port" --grace 2 -- "$@" >"$out.out" 2>"$out.err" &
}

case_work() {
  make_hosts 2
  write_cfg "$T/tiny.json" 3
  local cfg=$T/tiny.json
  # The reference: the same 2-rank world on one host, over loopback.
  on 1 "$EXE" launch --nproc-per-node 2 --master-port 0 -- train "$cfg" --save-weights "$T/loop.pt" \
    >"$T/loop.out" 2>&1 || { cat "$T/loop.out"; fail "loopback reference run"; }

  # ptune launch, 2 nodes x 1 rank.
  launch_on 1 2 1 29517 "$T/a" -- train "$cfg" --save-weights "$T/net.pt"
  local a=$!
  launch_on 2 2 1 29517 "$T/b" -- train "$cfg" --save-weights "$T/net-b.pt"
  local b=$!
  wait $a; local ca=$?
  wait $b; local cb=$?
  cat "$T/a.out" "$T/a.err" "$T/b.err"
  check '[ $ca = 0 ] && [ $cb = 0 ]' "ptune launch --nnodes 2: both nodes exit 0"
  check 'grep -q "^trained 3 steps" "$T/a.out"' "rank 0 (node 1) reports the training"
  check '! grep -q "trained" "$T/b.out"' "rank 1 (node 2) prints nothing"
  check '[ ! -e "$T/net-b.pt" ]' "only rank 0 writes weights"
  check 'same_weights "$T/loop.pt" "$T/net.pt"' "2 nodes x 1 rank: weights identical to 2 ranks on one host"

  # Eval across the nodes equals one process.
  local ev=(eval "$cfg" --weights "$T/net.pt" --format json --set data.num_samples=37)
  on 1 "$EXE" "${ev[@]}" >"$T/one.json" 2>"$T/one.err"
  launch_on 1 2 1 29518 "$T/ea" -- "${ev[@]}"
  a=$!
  launch_on 2 2 1 29518 "$T/eb" -- "${ev[@]}"
  b=$!
  wait $a; ca=$?
  wait $b; cb=$?
  cp "$T/ea.out" "$T/two.json"  # stdout: rank 0's JSON, unprefixed
  cat "$T/one.json" "$T/two.json" "$T/ea.err" "$T/eb.err"
  check '[ $ca = 0 ] && [ $cb = 0 ]' "eval across 2 nodes exits 0"
  check '[ "$(json "d[\"samples\"], d[\"top1\"]" "$T/two.json")" = "$(json "d[\"samples\"], d[\"top1\"]" "$T/one.json")" ]' \
    "eval across 2 nodes: samples and top-1 equal one process's"
  check '"${PY:-python3}" -c "import json,sys; a,b=(json.load(open(f))[\"loss\"] for f in sys.argv[1:]); sys.exit(abs(a-b) > 1e-3*abs(a))" "$T/one.json" "$T/two.json"' \
    "eval across 2 nodes: loss equals one process's within rounding (1e-3: the bound of dist_test's eval case)"

  # torchrun --no-python --nnodes 2 (static rendezvous: node 1's agent serves the store).
  if [ -n "$PY" ] && "$PY" -c 'import torch.distributed.run' 2>/dev/null; then
    for i in 1 2; do
      on "$i" "$PY" -m torch.distributed.run --no-python --nnodes 2 --node-rank $((i - 1)) --nproc-per-node 1 \
        --master-addr 10.213.0.1 --master-port 29519 "$EXE" train "$cfg" --save-weights "$T/tr$i.pt" \
        >"$T/tr$i.out" 2>"$T/tr$i.err" &
      eval "t$i=\$!"
    done
    # shellcheck disable=SC2154
    wait "$t1"; ca=$?
    wait "$t2"; cb=$?
    cat "$T/tr1.out" "$T/tr2.out"
    [ $ca = 0 ] && [ $cb = 0 ] || cat "$T/tr1.err" "$T/tr2.err"
    check '[ $ca = 0 ] && [ $cb = 0 ]' "torchrun --nnodes 2: both nodes exit 0"
    check 'same_weights "$T/loop.pt" "$T/tr1.pt"' "torchrun 2 nodes: weights identical to 2 ranks on one host"
  else
    fail "torchrun: no Python with torch ('$PY'); scripts/setup configures PTUNE_PYTHON"
  fi

  # Slurm's variables (srun on 2 nodes, 1 task each): the master is the node list's first
  # host, node1, resolved by the nodes' /etc/hosts; the port from dist.master_port.
  for i in 1 2; do
    on "$i" env SLURM_PROCID=$((i - 1)) SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NTASKS_PER_NODE=1 \
      SLURM_STEP_NODELIST='node[1-2]' SLURM_JOB_NODELIST='node[1-2]' \
      "$EXE" train "$cfg" --set dist.master_port=29520 --save-weights "$T/sl$i.pt" >"$T/sl$i.out" 2>"$T/sl$i.err" &
    eval "s$i=\$!"
  done
  # shellcheck disable=SC2154
  wait "$s1"; ca=$?
  wait "$s2"; cb=$?
  cat "$T/sl1.out" "$T/sl1.err" "$T/sl2.err"
  check '[ $ca = 0 ] && [ $cb = 0 ]' "Slurm variables on 2 nodes: both exit 0"
  check 'same_weights "$T/loop.pt" "$T/sl1.pt"' "Slurm 2 nodes: weights identical to 2 ranks on one host"

  # Sweep, 2 nodes x 2 ranks (node 2 names its interface with GLOO_SOCKET_IFNAME) against 4
  # ranks on one host: the same world, the same loss.
  on 1 "$EXE" launch --nproc-per-node 4 --master-port 0 -- sweep "$cfg" --out "$T/sw-loop.json" \
    >"$T/swl.out" 2>&1 || { cat "$T/swl.out"; fail "loopback 4-rank sweep"; }
  launch_on 1 2 2 29521 "$T/sa" -- sweep "$cfg" --out "$T/sw-net.json"
  a=$!
  GLOO_SOCKET_IFNAME=eth0 launch_on 2 2 2 29521 "$T/sb" -- sweep "$cfg" --out "$T/sw-b.json"
  b=$!
  wait $a; ca=$?
  wait $b; cb=$?
  cat "$T/sa.out" "$T/sa.err" "$T/sb.err"
  check '[ $ca = 0 ] && [ $cb = 0 ]' "sweep on 2 nodes x 2 ranks exits 0"
  check '[ "$(json "d[\"environment\"][\"world_size\"], d[\"rows\"][0][\"status\"]" "$T/sw-net.json")" = "4 ok" ]' \
    "sweep across nodes: world of 4, row ok"
  check '[ "$(json "repr(d[\"rows\"][0][\"loss\"])" "$T/sw-net.json")" = "$(json "repr(d[\"rows\"][0][\"loss\"])" "$T/sw-loop.json")" ]' \
    "sweep across nodes: loss identical to 4 ranks on one host"
}

# listeners_ok I PORT: every TCP socket listening on host I is bound to 10.213.0.I: the store
# (PORT, node 1 only) and Gloo's, none on a wildcard or loopback address.
listeners_ok() {
  local ss_out
  ss_out=$(ip netns exec "$ID-h$1" ss -Hltn)
  echo "host $1 listening:"
  echo "$ss_out"
  [ -n "$ss_out" ] || return 1
  ! echo "$ss_out" | awk '{ print $4 }' | grep -qv "^10\.213\.0\.$1:" || return 1
  [ "$1" != 1 ] || echo "$ss_out" | awk '{ print $4 }' | grep -qx "10\.213\.0\.1:$2"
}

case_late() {
  make_hosts 2
  write_cfg "$T/tiny.json" 3
  # Node 2 never comes: node 1's ranks (rank 0 serves the store, rank 1 a client of it) wait
  # dist.timeout_s, then fail naming the rendezvous.
  local t0 t1
  t0=$(now)
  launch_on 1 2 2 29522 "$T/a" -- train "$T/tiny.json"
  wait $!; local ca=$?
  t1=$(now)
  cat "$T/a.out" "$T/a.err"
  echo "measured: node never comes: node 1 failed after $(secs "$t0" "$t1") s (dist.timeout_s $TIMEOUT_S)"
  check '[ $ca = 1 ]' "node 1 exits 1"
  check 'within "$t0" "$t1" $((TIMEOUT_S + SLACK_S))' "node 1 gave up within dist.timeout_s + $SLACK_S s"
  check 'last_line "$T/a.err" | grep -q "^ptune: error: rank [01] (node 0, host node1) exited with status 1: dist: rendezvous at 10.213.0.1:29522 failed for rank [01] of 4: only 2 of 4 ranks joined within dist.timeout_s ($TIMEOUT_S s)"' \
    "the last line names the rank, node, host, the rendezvous and how many ranks came"
  check 'empty 1' "no process left on node 1"

  # Node 1 (the master) never comes: node 2's ranks time out connecting.
  t0=$(now)
  launch_on 2 2 1 29523 "$T/b" -- train "$T/tiny.json"
  wait $!; local cb=$?
  t1=$(now)
  cat "$T/b.err"
  echo "measured: master never comes: node 2 failed after $(secs "$t0" "$t1") s"
  check '[ $cb = 1 ]' "node 2 exits 1"
  # Connect attempts of at most a second each, the last one ending at the deadline.
  check 'within "$t0" "$t1" $((TIMEOUT_S + SLACK_S))' "node 2 gave up within dist.timeout_s + $SLACK_S s"
  check 'last_line "$T/b.err" | grep -q "^ptune: error: rank 1 (node 1, host node2) exited with status 1: dist: rendezvous at 10.213.0.1:29523 failed for rank 1 of 2: rank 0.s store did not answer within dist.timeout_s ($TIMEOUT_S s); the last attempt: "' \
    "the last line names rank 1, node 1, its host, the rendezvous and the timeout"
  check 'empty 2' "no process left on node 2"
  check '! grep -q "frame #\|TCPStore.cpp" "$T/b.err"' "no LibTorch log lines or stack frames before the error (only with --verbose)"

  # A master address that is not node 1's: rank 0 cannot serve the store there, and says so.
  on 1 "$EXE" launch --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 10.213.0.2 --master-port 29524 \
    -- train "$T/tiny.json" >"$T/w.out" 2>"$T/w.err"
  local cw=$?
  cat "$T/w.err"
  check '[ $cw = 1 ]' "a master address of another host: exit 1"
  check 'last_line "$T/w.err" | grep -q "cannot listen on 10.213.0.2:29524: Cannot assign requested address (not an address of this machine); MASTER_ADDR must be an address of rank 0.s machine"' \
    "it names the address that is not this machine's"
}

case_linkcut() {
  make_hosts 2
  write_cfg "$T/tiny.json" 100000
  launch_on 1 2 1 29525 "$T/a" -- train "$T/tiny.json"
  local a=$!
  launch_on 2 2 1 29525 "$T/b" -- train "$T/tiny.json"
  local b=$!
  wait_text "$T/a.err" "[rank 0] step 3/" 60 || { cat "$T/a.err" "$T/b.err"; fail "training did not start"; return; }
  check 'listeners_ok 1 29525' "node 1 listens on 10.213.0.1 only (the store on :29525, Gloo)"
  check 'listeners_ok 2 29525' "node 2 listens on 10.213.0.2 only (Gloo)"
  local t0 ta tb
  t0=$(now)
  ip -n "$ID-h2" link set eth0 down
  wait $a; local ca=$?
  ta=$(now)
  wait $b; local cb=$?
  tb=$(now)
  tail -3 "$T/a.err"
  tail -3 "$T/b.err"
  echo "measured: link cut: node 1 failed after $(secs "$t0" "$ta") s, node 2 after $(secs "$t0" "$tb") s"
  check '[ $ca = 1 ] && [ $cb = 1 ]' "both nodes exit 1"
  check 'within "$t0" "$ta" $((TIMEOUT_S + SLACK_S)) && within "$t0" "$tb" $((TIMEOUT_S + SLACK_S))' \
    "both gave up within dist.timeout_s + $SLACK_S s"
  check 'last_line "$T/a.err" | grep -q "^ptune: error: rank 0 (node 0, host node1) exited with status 1: .*collective failed"' \
    "node 1's last line names rank 0 and the failed collective"
  check 'last_line "$T/b.err" | grep -q "^ptune: error: rank 1 (node 1, host node2) exited with status 1: .*collective failed"' \
    "node 2's last line names rank 1 and the failed collective"
  check 'empty 1 && empty 2' "no process left on either node"
}

case_kill() {
  make_hosts 2
  write_cfg "$T/tiny.json" 100000
  # 1. SIGKILL of node 2's launcher: its ranks get SIGTERM (parent-death signal) and the run
  #    stops together at the next step, as after Ctrl-C.
  launch_on 1 2 1 29526 "$T/a" -- train "$T/tiny.json"
  local a=$!
  launch_on 2 2 1 29526 "$T/b" -- train "$T/tiny.json"
  local b=$!
  wait_text "$T/a.err" "[rank 0] step 3/" 60 || { cat "$T/a.err" "$T/b.err"; fail "training did not start"; return; }
  local t0 ta
  t0=$(now)
  # The launcher is the child of `unshare`'s exec: the process in host 2 whose parent is not there.
  local launcher
  launcher=$(pgrep -f -n -- "--node-rank 1 .*--master-port 29526")
  kill -9 "$launcher"
  wait $a; local ca=$?
  ta=$(now)
  wait $b
  cat "$T/a.err" | tail -4
  echo "measured: node 2's launcher SIGKILLed: node 1 ended after $(secs "$t0" "$ta") s"
  check 'within "$t0" "$ta" $((TIMEOUT_S + SLACK_S))' "node 1 ended within dist.timeout_s + $SLACK_S s"
  check '[ $ca != 0 ]' "node 1 exits non-zero ($ca)"
  check 'tail -1 "$T/a.err" | grep -q "^ptune: .*rank 0 (node 0, host node1)"' "node 1's last line names rank 0 and its host"
  sleep 1
  check 'empty 1 && empty 2' "no process left on either node"

  # 2. The whole of node 2 killed (launcher and ranks, SIGKILL): node 1 fails at once.
  launch_on 1 2 1 29527 "$T/c" -- train "$T/tiny.json"
  a=$!
  launch_on 2 2 1 29527 "$T/d" -- train "$T/tiny.json"
  b=$!
  wait_text "$T/c.err" "[rank 0] step 3/" 60 || { cat "$T/c.err" "$T/d.err"; fail "training did not start"; return; }
  t0=$(now)
  # shellcheck disable=SC2046
  kill -9 $(ip netns pids "$ID-h2")
  wait $a; ca=$?
  ta=$(now)
  wait $b
  tail -3 "$T/c.err"
  echo "measured: node 2 killed whole: node 1 failed after $(secs "$t0" "$ta") s"
  check '[ $ca = 1 ]' "node 1 exits 1"
  check 'within "$t0" "$ta" $((TIMEOUT_S + SLACK_S))' "node 1 gave up within dist.timeout_s + $SLACK_S s"
  check 'last_line "$T/c.err" | grep -q "^ptune: error: rank 0 (node 0, host node1) exited with status 1: .*collective failed"' \
    "node 1's last line names rank 0 and the failed collective"
  check 'empty 1 && empty 2' "no process left on either node"
}

case_netem() {
  make_hosts 2
  write_cfg "$T/tiny.json" 3
  local cfg=$T/tiny.json
  local link="5 ms delay + 1% loss each way"
  if ! ip netns exec "$ID-h1" tc qdisc add dev eth0 root netem delay 5ms loss 1% 2>"$T/tc.err"; then
    # Kernels without sch_netem (e.g. minimal VM kernels): a slow link at least, by token bucket.
    echo "netem unavailable ($(cat "$T/tc.err")): rate-limiting the links with tbf instead (no loss, no delay)"
    link="links limited to 400 Mbit/s (tbf)"
    for i in 1 2; do
      ip netns exec "$ID-h$i" tc qdisc add dev eth0 root tbf rate 400mbit burst 256kb latency 100ms ||
        skip "neither tc netem nor tbf works here"
    done
  else
    ip netns exec "$ID-h2" tc qdisc add dev eth0 root netem delay 5ms loss 1%
  fi
  on 1 "$EXE" launch --nproc-per-node 2 --master-port 0 -- train "$cfg" --save-weights "$T/loop.pt" \
    >"$T/loop.out" 2>&1 || { cat "$T/loop.out"; fail "loopback reference run"; }
  local t0 t1
  t0=$(now)
  launch_on 1 2 1 29528 "$T/a" -- train "$cfg" --save-weights "$T/net.pt"
  local a=$!
  launch_on 2 2 1 29528 "$T/b" -- train "$cfg"
  local b=$!
  wait $a; local ca=$?
  wait $b; local cb=$?
  t1=$(now)
  cat "$T/a.out" "$T/a.err" "$T/b.err"
  echo "measured: $link: 3 steps across 2 nodes took $(secs "$t0" "$t1") s in all"
  check '[ $ca = 0 ] && [ $cb = 0 ]' "training over a lossy, slow link completes"
  check 'same_weights "$T/loop.pt" "$T/net.pt"' "weights identical to 2 ranks on one host"
}

case "$CASE" in
  work | late | linkcut | kill | netem) "case_$CASE" ;;
  *) echo "unknown case $CASE"; exit 2 ;;
esac
[ $FAILED = 0 ] && echo "PASS: $CASE" || echo "FAILED: $CASE"
exit $FAILED
