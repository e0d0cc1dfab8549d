#!/bin/bash
# Guest test: the kernel's connection manager over a urdma device. urdma.ko
# serves the kernel's QP 1 through the NIC agent, so the system's librdmacm
# (rdma_cm in the kernel) connects programs that use the rdma-core provider
# (liburdma-rdmav34.so) on urdma, with Linux Soft-RoCE as the peer: rxe in
# the root namespace on one end of a veth, the urdma device and its NIC
# agent in a namespace of their own on the other end (link-local addresses
# only). Each program runs both ways: rping, ucmatose, udaddy (UD and the
# kernel's SIDR) and ib_write_bw -R; the agent is killed and restarted,
# the device deleted under it; rdma-core's pyverbs rdma_cm tests run on a
# urdma device of the VM's virtio NIC. Then the kernel log must be clean.
# Prints "ok - kcm: NAME" / "FAIL - kcm: NAME" per check.
set -u
U=${URDMA:?URDMA names the urdma binary}
KO=${URDMA_KO:-/share/urdma.ko}
SO=${URDMA_PROVIDER:-/share/liburdma-rdmav34.so}
DRIVER=/project/crates/urdma-provider/urdma.driver
T=${KCM_TIMEOUT:-60}
NS=urdma-kcm
IP_R=169.254.72.1
IP_U=169.254.72.2
DEV_R=kcv-r
DEV_U=kcv-u
PROVIDERS=/usr/lib/x86_64-linux-gnu/libibverbs
W=$(mktemp -d)
failures=0
ok() { echo "ok - kcm: $*"; }
fail() { echo "FAIL - kcm: $*"; failures=$((failures + 1)); }

cleanup() {
  local p
  for p in $(ip netns pids $NS 2>/dev/null); do kill "$p" 2>/dev/null; done
  sleep 0.5
  for p in $(ip netns pids $NS 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  ip netns exec $NS rdma link delete urdmak 2>/dev/null
  rdma link delete rxek 2>/dev/null
  ip link del $DEV_R 2>/dev/null
  ip netns del $NS 2>/dev/null
  if [ -n "${NIC:-}" ]; then
    ip addr flush dev "$NIC" 2>/dev/null
    ip link set "$NIC" down 2>/dev/null
  fi
  umount /etc/libibverbs.d 2>/dev/null
  umount $PROVIDERS 2>/dev/null
  rmmod urdma 2>/dev/null
  # rxe holds UDP 4791 of the root namespace while it is loaded.
  modprobe -r rdma_ucm rdma_rxe 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT

mkdir -p "$W/prov" "$W/ibvd"
cp -a $PROVIDERS/. "$W/prov/" && cp "$SO" "$W/prov/liburdma-rdmav34.so" &&
  cp -a /etc/libibverbs.d/. "$W/ibvd/" && cp "$DRIVER" "$W/ibvd/urdma.driver" &&
  mount --bind "$W/prov" $PROVIDERS && mount --bind "$W/ibvd" /etc/libibverbs.d ||
  { fail "provider installed"; exit 1; }
modprobe veth && modprobe rdma_rxe && modprobe rdma_ucm && modprobe ib_uverbs ||
  { fail "modules veth, rdma_rxe, rdma_ucm, ib_uverbs load"; exit 1; }
insmod "$KO" || { fail "urdma.ko loads"; exit 1; }
dmesg -C
ip netns add $NS &&
  ip link add $DEV_R type veth peer name $DEV_U netns $NS &&
  ip addr add $IP_R/24 dev $DEV_R && ip link set $DEV_R up &&
  ip -n $NS addr add $IP_U/24 dev $DEV_U && ip -n $NS link set $DEV_U up &&
  ip -n $NS link set lo up || { fail "veth between the root namespace and $NS"; exit 1; }
rdma link add rxek type rxe netdev $DEV_R || { fail "rdma link add rxek"; exit 1; }
ip netns exec $NS rdma link add urdmak type urdma netdev $DEV_U ||
  { fail "rdma link add urdmak in $NS"; exit 1; }
busybox ping -c 1 -W 5 $IP_U >/dev/null 2>&1 || fail "ping $IP_U from the root namespace"

# start_agent: the NIC agent of the namespace, as the system service
# runs it; AGENT is its PID. It must attach to urdmak (the Nth time: $1).
start_agent() {
  ip netns exec $NS env URDMA_ADDR=$IP_U URDMA_LOG=urdma=info "$U" agent --persist --open-all >>"$W/agent" 2>&1 &
  AGENT=$!
  for _ in $(seq 1 100); do
    [ "$(dmesg | grep -c "urdmak: a NIC attached")" -ge "$1" ] && return 0
    sleep 0.1
  done
  sed 's/^/    agent: /' "$W/agent" | tail -5
  dmesg | tail -5 | sed 's/^/    dmesg: /'
  return 1
}
if start_agent 1; then ok "the NIC agent attaches to urdmak"; else fail "the NIC agent attaches to urdmak"; fi

# In the urdma namespace.
IN_U="ip netns exec $NS"

# pair NAME CHECK SERVER... -- CLIENT...: the server, then the client two
# seconds later; both must exit 0 within $T s and the client's output
# must match the regex CHECK.
pair() {
  local name=$1 check=$2 srv=() cli=() spid crc src
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do srv+=("$1"); shift; done
  shift
  cli=("$@")
  # Line-buffered, so that a program stopped by the timeout still shows
  # how far it got.
  timeout -k 5 "$T" stdbuf -oL "${srv[@]}" >"$W/srv" 2>&1 &
  spid=$!
  sleep 2
  timeout -k 5 "$T" stdbuf -oL "${cli[@]}" >"$W/cli" 2>&1
  crc=$?
  wait $spid
  src=$?
  if [ $crc = 0 ] && [ $src = 0 ] && grep -Eq -- "$check" "$W/cli"; then
    ok "$name"
  else
    fail "$name (server status $src, client status $crc)"
    sed 's/^/    server: /' "$W/srv" | tail -8
    sed 's/^/    client: /' "$W/cli" | tail -8
  fi
}

pair "rping: rxe serves, urdma connects (100 pings, verified)" 'ping data' \
  rping -s -a $IP_R -C 100 -V -- \
  $IN_U rping -c -a $IP_R -C 100 -V -v
pair "rping: urdma serves, rxe connects (100 pings, verified)" 'ping data' \
  $IN_U rping -s -a $IP_U -C 100 -V -- \
  rping -c -a $IP_U -C 100 -V -v
pair "ucmatose: rxe serves, urdma connects" 'test complete' \
  ucmatose -b $IP_R -C 10 -- \
  $IN_U ucmatose -s $IP_R -C 10
pair "ucmatose: urdma serves, rxe connects" 'test complete' \
  $IN_U ucmatose -b $IP_U -C 10 -- \
  ucmatose -s $IP_U -C 10
pair "udaddy (UD, SIDR): rxe serves, urdma connects" 'test complete' \
  udaddy -b $IP_R -C 10 -- \
  $IN_U udaddy -s $IP_R -C 10
pair "udaddy (UD, SIDR): urdma serves, rxe connects" 'test complete' \
  $IN_U udaddy -b $IP_U -C 10 -- \
  udaddy -s $IP_U -C 10
pair "ib_write_bw -R: rxe serves, urdma connects" 'BW average|bytes' \
  ib_write_bw -R -d rxek -n 200 -F -- \
  $IN_U ib_write_bw -R -d urdmak -n 200 -F $IP_R
pair "ib_write_bw -R: urdma serves, rxe connects" 'BW average|bytes' \
  $IN_U ib_write_bw -R -d urdmak -n 200 -F -- \
  ib_write_bw -R -d rxek -n 200 -F $IP_U

# The agent dies: the kernel's QP 1 loses its NIC; a new agent takes over
# and the kernel's connection manager works again.
kill -9 $AGENT
wait $AGENT 2>/dev/null
for _ in $(seq 1 50); do dmesg | grep -q "urdmak: the NIC left" && break; sleep 0.1; done
if dmesg | grep -q "urdmak: the NIC left"; then ok "a killed agent leaves urdmak"; else fail "a killed agent leaves urdmak"; fi
if start_agent 2; then ok "a new agent attaches to urdmak"; else fail "a new agent attaches to urdmak"; fi
pair "rping after the agent restarted: urdma connects to rxe" 'ping data' \
  rping -s -a $IP_R -C 10 -V -- \
  $IN_U rping -c -a $IP_R -C 10 -V -v

# The device goes while the agent serves it: the agent lets go of it and
# lives on; then the module unloads.
if timeout 30 ip netns exec $NS rdma link delete urdmak; then
  ok "rdma link delete urdmak while the agent is attached"
else
  fail "rdma link delete urdmak while the agent is attached"
fi
sleep 1
if grep -q "the kernel device is gone" "$W/agent" && kill -0 $AGENT 2>/dev/null; then
  ok "the agent sees the kernel device go and lives on"
else
  fail "the agent sees the kernel device go and lives on"
  sed 's/^/    agent: /' "$W/agent" | tail -5
fi

# rdma-core's rdma_cm tests (pyverbs), both ends on one urdma device: they
# need a device whose network interface pyverbs finds through sysfs (a NIC
# with a parent device), so the device is bound to the VM's virtio NIC,
# which reaches nothing outside the VM (QEMU's restricted user network).
# rxe holds UDP 4791 of the root namespace: it goes first.
rdma link delete rxek 2>/dev/null
modprobe -r rdma_rxe 2>/dev/null
modprobe virtio_net 2>/dev/null
NIC=$(ls /sys/bus/virtio/drivers/virtio_net/*/net 2>/dev/null | head -1)
if [ -z "$NIC" ]; then
  fail "pyverbs rdma_cm tests: no virtio NIC in the VM"
else
  sysctl -qw net.ipv6.conf."$NIC".disable_ipv6=1
  ip addr add 169.254.73.1/16 dev "$NIC" && ip link set "$NIC" up &&
    rdma link add urdmap type urdma netdev "$NIC" || fail "rdma link add urdmap on $NIC"
  GP=$(for f in /sys/class/infiniband/urdmap/ports/1/gids/*; do
    [ "$(cat "$f")" = "0000:0000:0000:0000:0000:ffff:a9fe:4901" ] &&
      [ "$(cat /sys/class/infiniband/urdmap/ports/1/gid_attrs/types/${f##*/})" = "RoCE v2" ] &&
      echo "${f##*/}"; done | head -1)
  rm -rf "$W/py" && cp -r /usr/share/doc/rdma-core/tests "$W/py" && gunzip -f "$W"/py/*.gz
  (cd "$W/py" && timeout -k 5 300 python3 run_tests.py --dev urdmap --gid "${GP:-1}" -v test_rdmacm >"$W/pycm" 2>&1)
  passed=$(grep -c '\.\.\. ok$' "$W/pycm")
  summary=$(grep -E '^(Ran|OK|FAILED)' "$W/pycm" | tr '\n' ' ')
  if [ "$passed" -gt 0 ] && ! grep -Eq '^(ERROR|FAIL): ' "$W/pycm"; then
    ok "pyverbs rdma_cm tests on urdmap: $passed ok ($summary)"
  else
    fail "pyverbs rdma_cm tests on urdmap ($summary)"
    grep -E '\.\.\. |^(ERROR|FAIL): |Error' "$W/pycm" | head -30 | sed 's/^/    /'
  fi
  rdma link delete urdmap
fi

pkill -f "urdma agent"
for _ in $(seq 50); do pgrep -f "urdma agent" >/dev/null || break; sleep 0.1; done
if rmmod urdma; then ok "urdma.ko unloads"; else fail "urdma.ko unloads"; fi

# The kernel log: no warning, no error, no leak report.
if dmesg | grep -Eiq 'WARNING|BUG|leak|error|Call Trace'; then
  fail "kernel log clean"
  dmesg | grep -Ei -B2 -A8 'WARNING|BUG|leak|error|Call Trace' | head -30 | sed 's/^/    /'
else
  ok "kernel log clean"
fi
[ $failures = 0 ]
