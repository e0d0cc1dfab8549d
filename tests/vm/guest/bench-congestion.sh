#!/bin/bash
# Benchmark, not a test (tests/vm/run bench-congestion.sh, or bench/run):
# RC flows through one congested link. The client namespace's end of the
# veth sends through a token bucket of BENCH_RATE (default 40mbit) whose
# queue is RED with ECN marking, as a RoCE switch marks. Three runs:
#   1. 4 urdma flows (1 MiB RDMA WRITEs) with ECN (CNPs, DCQCN pacing);
#   2. the same with URDMA_ECN=0 (no marks: only the loss response);
#   3. one urdma flow beside one TCP stream.
# For each: the total against the link rate, Jain's fairness index over
# the flows, and the drop rate of the queue. The guest CPU is emulated:
# the link rate is set low enough that the link, not the CPU, limits.
set -u
U=${URDMA:?URDMA names the urdma binary}
. "$(dirname "$0")/lib/netns.sh"
RATE=${BENCH_RATE:-40mbit}
ITERS=${BENCH_ITERS:-24}
FLOWS=4
T=$(mktemp -d)
trap 'netns_cleanup; rm -rf "$T"' EXIT

rate_bits() { # 40mbit -> 40000000
  awk -v r="$1" 'BEGIN { n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u);
    m = (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : 1;
    printf "%.0f", n * m }'
}
LINK=$(rate_bits "$RATE")

if ! netns_setup; then
  echo "FAIL - bench-congestion: cannot create the namespaces and the veth pair"
  exit 1
fi

# The bottleneck: tbf at RATE, RED marking ECN-capable packets above a
# few packets of queue (dropping the others, and all above its limit).
bottleneck() {
  modprobe sch_tbf 2>/dev/null; modprobe sch_red 2>/dev/null
  tc -n $NS_C qdisc del dev ve-c root 2>/dev/null
  tc -n $NS_C qdisc add dev ve-c root handle 1: tbf rate "$RATE" burst 16kb latency 200ms &&
    tc -n $NS_C qdisc add dev ve-c parent 1:1 handle 10: red limit 400000 min 12000 \
      max 36000 avpkt 1100 burst 12 probability 0.2 bandwidth "$RATE" ecn
}

# Sent packets, dropped packets and sent bytes of the bottleneck's queue
# so far, and the time (s).
qdisc_counts() {
  tc -s -n $NS_C qdisc show dev ve-c | awk -v now="$EPOCHREALTIME" '/^qdisc tbf/ { t = 1 } t && /Sent/ {
    gsub(/[(),]/, " "); for (i = 1; i <= NF; i++) { if ($i == "pkt") s = $(i - 1); if ($i == "dropped") d = $(i + 1); if ($i == "bytes") b = $(i - 1) }
    print s + 0, d + 0, b + 0, now; exit }'
}

# flows N ENV: N urdma bench pairs at once; prints each flow's MiB/s.
flows() {
  local n=$1 envs=$2 i port pids=()
  for i in $(seq 1 "$n"); do
    port=$((18600 + i))
    ip netns exec $NS_S env $envs "$U" bench --server --once --bind $IP_S --ctrl-port $port \
      --mtu 1024 > "$T/srv$i" 2>&1 &
  done
  sleep 1
  for i in $(seq 1 "$n"); do
    port=$((18600 + i))
    ip netns exec $NS_C env $envs timeout 300 "$U" bench $IP_S --bind $IP_C --ctrl-port $port \
      --ops write --sizes 1048576 --bw-only --mtu 1024 --depth 8 -n "$ITERS" --no-tcp \
      > "$T/cli$i" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  wait
  for i in $(seq 1 "$n"); do
    awk '$1 == 1048576 { print $3 }' "$T/cli$i" | tail -1
  done
}

# report NAME BEFORE AFTER FIGURES...: what crossed the link meanwhile
# (its share of the link rate), each flow's own average and Jain's
# fairness index over them, and the queue's drops.
report() {
  local name=$1 before=$2 after=$3
  shift 3
  echo "$before $after $*" | awk -v name="$name" -v link="$LINK" '{
    s = $5 - $1; d = $6 - $2; bytes = $7 - $3; secs = $8 - $4; n = 0; sum = 0; sq = 0; list = ""
    for (i = 9; i <= NF; i++) { x = $i + 0; n++; sum += x; sq += x * x; list = list sprintf(" %.2f", x) }
    if (n == 0 || sum == 0 || secs <= 0) { printf "%s: no figures\n", name; exit 1 }
    jain = sum * sum / (n * sq); share = bytes * 8 / secs / link
    printf "%s: flows%s MiB/s; link carried %.2f MiB/s = %.2f of its rate; Jain fairness %.3f; drops %d of %d packets (%.2f%%)\n",
      name, list, bytes / secs / 1048576, share, jain, d, s + d, (s + d) ? 100 * d / (s + d) : 0 }'
}

failed=0
for mode in ecn noecn; do
  bottleneck || { echo "FAIL - bench-congestion: cannot set up tbf and RED"; exit 1; }
  envs="URDMA_NIC_SOCKET=urdma-bench-$mode"
  [ $mode = noecn ] && envs="$envs URDMA_ECN=0"
  before=$(qdisc_counts)
  figs=$(flows $FLOWS "$envs")
  after=$(qdisc_counts)
  # shellcheck disable=SC2086
  report "$FLOWS urdma flows, $RATE, $mode" "$before" "$after" $figs || failed=1
  # The devices' last counters (urdma stat lists closed devices too).
  ip netns exec $NS_C "$U" stat 2>/dev/null | grep -E "addr ($IP_C|$IP_S):" | head -2 |
    sed 's/^/    /'
  sleep 6
done

# One urdma flow beside one TCP stream (python3 on both ends), both sending
# for the whole urdma run; the TCP receiver counts its bytes meanwhile.
bottleneck || exit 1
cat > "$T/sink.py" <<'EOF'
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5201)); s.listen(1); c, _ = s.accept()
total = 0
with open(sys.argv[2], "w") as log:
    while True:
        b = c.recv(1 << 16)
        if not b: break
        total += len(b); log.write("%.3f %d\n" % (time.time(), total)); log.flush()
EOF
cat > "$T/source.py" <<'EOF'
import socket, sys, time
c = socket.create_connection((sys.argv[1], 5201)); end = time.time() + float(sys.argv[2]); b = b"\0" * 65536
while time.time() < end: c.sendall(b)
EOF
ip netns exec $NS_S python3 "$T/sink.py" $IP_S "$T/tcp.log" &
sink=$!
sleep 1
ip netns exec $NS_C timeout 900 python3 "$T/source.py" $IP_S 600 &
src=$!
sleep 3
t0=$(date +%s.%N)
before=$(qdisc_counts)
urdma=$(ITERS=$((ITERS / 3)) flows 1 "URDMA_NIC_SOCKET=urdma-bench-ecn")
after=$(qdisc_counts)
t1=$(date +%s.%N)
kill $src 2>/dev/null; wait $src 2>/dev/null; wait $sink 2>/dev/null
tcp=$(awk -v a="$t0" -v b="$t1" '$1 >= a && !f { x = $2; ta = $1; f = 1 } $1 <= b { y = $2; tb = $1 }
  END { if (tb > ta) printf "%.2f", (y - x) / (tb - ta) / 1048576; else print 0 }' "$T/tcp.log")
report "urdma beside TCP, $RATE (urdma, TCP)" "$before" "$after" "${urdma:-0}" "$tcp" || failed=1
echo "$tcp $LINK" | awk '{ printf "    TCP kept %.2f of the link\n", $1 * 1048576 * 8 / $2 }'
[ $failed = 0 ] && echo "ok - bench-congestion: figures measured"
[ $failed = 0 ]
