#!/bin/bash
# Benchmark, not a test (tests/vm/run --bench-loss): goodput of a stream of
# 1 MiB RDMA WRITEs (`urdma bench --ops write --sizes 1048576 --bw-only`)
# between two network namespaces joined by a veth pair, with netem loss of
# 0%, 1% and 5% on both ends, and each figure's ratio to the loss-free one.
# Each loss rate runs twice, from agents of their own: with urdma's
# selective retransmission (the default between urdma peers) and with
# URDMA_SELECTIVE=0 (IBTA go-back-N, what a peer such as rxe gets). TCP on
# the same path is shown for comparison. Path MTU 1024 (the veth MTU is
# 1500); BENCH_ITERS writes per run (default 64), BENCH_DEPTH outstanding
# (default 16), each run within BENCH_BUDGET seconds (default 300). The
# guest CPU is emulated: absolute figures are far below those of real
# hardware, the ratios are what matters.
set -u
U=${URDMA:?URDMA names the urdma binary}
. "$(dirname "$0")/lib/netns.sh"
ITERS=${BENCH_ITERS:-64}
DEPTH=${BENCH_DEPTH:-16}
BUDGET=${BENCH_BUDGET:-300}
T=$(mktemp -d)
trap 'netns_cleanup; rm -rf "$T"' EXIT

if ! netns_setup; then
  echo "FAIL - bench-loss: cannot create the namespaces and the veth pair"
  exit 1
fi
failed=0
declare -A base
for loss in 0 1 5; do
  if [ $loss = 0 ]; then netem none; else netem loss $loss%; fi || {
    echo "FAIL - bench-loss: cannot set netem loss $loss%"
    exit 1
  }
  for mode in selective go-back-N; do
    envs="URDMA_NIC_SOCKET=urdma-bench-loss-$mode"
    [ $mode = go-back-N ] && envs="$envs URDMA_SELECTIVE=0"
    # shellcheck disable=SC2086
    ip netns exec $NS_S env $envs "$U" bench --server --once --bind $IP_S \
      --mtu 1024 --depth "$DEPTH" > "$T/srv" 2>&1 &
    sp=$!
    t0=$EPOCHREALTIME
    # shellcheck disable=SC2086
    ip netns exec $NS_C env $envs "$U" bench $IP_S --bind $IP_C --ops write \
      --sizes 1048576 --bw-only --mtu 1024 --depth "$DEPTH" -n "$ITERS" > "$T/cli" 2>&1 &
    cp=$!
    # At most BUDGET seconds; a run that takes longer is reported with both
    # sides' counters, then killed.
    start=$SECONDS
    while kill -0 $cp 2>/dev/null && [ $((SECONDS - start)) -lt "$BUDGET" ]; do
      sleep 0.2
    done
    if kill -0 $cp 2>/dev/null; then
      echo "    no result after $BUDGET s; counters (urdma stat --qp):"
      for ns in $NS_C $NS_S; do
        ip netns exec $ns env $envs "$U" stat --qp 2>&1 | sed "s/^/    $ns: /"
      done
      kill -9 $cp $sp 2>/dev/null
    fi
    wait $cp
    rc=$?
    wait $sp
    ms=$(ms_since "$t0")
    # The row: #bytes #iterations BW[MiB/s] MsgRate[Mpps] TCP-BW[MiB/s] urdma/TCP
    row=$(grep -E '^ +1048576 ' "$T/cli")
    bw=$(echo "$row" | awk '{ print $3 }')
    tcp=$(echo "$row" | awk '{ print $5 }')
    if [ $rc != 0 ] || [ -z "${bw:-}" ]; then
      sed 's/^/    /' "$T/cli" "$T/srv"
      echo "FAIL - bench-loss: the $mode benchmark at $loss% loss failed (exit status $rc)"
      failed=1
      sleep 6
      continue
    fi
    [ -n "${base[$mode]:-}" ] || base[$mode]=$bw
    # What both devices did: packets resent, probes and timeouts on the
    # sending side; packets kept out of sequence and NAKs on the other.
    ip netns exec $NS_C env $envs "$U" stat 2>/dev/null | grep -E "addr $IP_C:" | head -1 |
      sed 's/^.*final counters\] /    sender: /'
    ip netns exec $NS_S env $envs "$U" stat 2>/dev/null | grep -E "addr $IP_S:" | head -1 |
      sed 's/^.*final counters\] /    receiver: /'
    awk -v l=$loss -v m=$mode -v bw="$bw" -v b="${base[$mode]}" -v tcp="$tcp" -v ms="$ms" -v n="$ITERS" 'BEGIN {
      printf "loss %d%%, %s: RDMA WRITE 1 MiB goodput %8.2f MiB/s, %.2f of the loss-free figure (TCP %s MiB/s; %d writes, %.1f s)\n",
        l, m, bw, bw / b, tcp, n, ms / 1000 }'
    # The agents leave once idle for 5 s: the next run's own agents need
    # the address.
    sleep 6
  done
done
[ $failed = 0 ] && echo "ok - bench-loss: figures measured"
[ $failed = 0 ]
