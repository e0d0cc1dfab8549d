#!/bin/bash
# Guest benchmark: NVMe over Fabrics throughput on one VM, side by side:
# the RDMA transport over a urdma device, over Linux Soft-RoCE (rxe) on the
# same interface, and NVMe/TCP on the same address. The kernel's NVMe
# target exports a RAM-backed file (64 MiB); the kernel's host connects to
# it on the VM's own address, so every byte crosses the transport twice
# (host and target) on the same CPUs. Each case writes then reads the
# whole namespace with direct I/O (dd, 1 MiB blocks) and prints MB/s; the
# last lines give urdma's ratios to rxe and to TCP. Prints
# "ok - bench-nvmeof: ..." lines.
set -u
U=${URDMA:?URDMA names the urdma binary}
KO=${URDMA_KO:-/share/urdma.ko}
IP=169.254.75.1
NQN=nqn.2026-11.io.urdma:bench
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:5d1c2a3e-7f64-4b9a-8e21-6c0d9b4f1a77
CFG=/sys/kernel/config/nvmet
MB=64
W=$(mktemp -d)
failures=0
ok() { echo "ok - bench-nvmeof: $*"; }
fail() { echo "FAIL - bench-nvmeof: $*"; failures=$((failures + 1)); }

teardown_target() {
  rm -f $CFG/ports/1/subsystems/$NQN 2>/dev/null
  rmdir $CFG/ports/1 2>/dev/null
}

cleanup() {
  timeout 30 nvme disconnect -n $NQN >/dev/null 2>&1
  teardown_target
  echo 0 > $CFG/subsystems/$NQN/namespaces/1/enable 2>/dev/null
  rmdir $CFG/subsystems/$NQN/namespaces/1 $CFG/subsystems/$NQN 2>/dev/null
  [ -n "${AGENT:-}" ] && kill "$AGENT" 2>/dev/null
  sleep 0.5
  rdma link delete urdmab 2>/dev/null
  rdma link delete rxeb 2>/dev/null
  [ -n "${NIC:-}" ] && ip addr flush dev "$NIC" 2>/dev/null
  modprobe -r nvme_rdma nvmet_rdma nvme_tcp nvmet_tcp rdma_rxe 2>/dev/null
  rmmod urdma 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT

modprobe -r rdma_rxe 2>/dev/null
modprobe ib_uverbs && modprobe rdma_cm && modprobe virtio_net && modprobe nvmet_rdma &&
  modprobe nvme_rdma && modprobe nvmet_tcp && modprobe nvme_tcp || { fail "modules load"; exit 1; }
lsmod | grep -q '^urdma ' || insmod "$KO" || { fail "urdma.ko loads"; exit 1; }
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
NIC=$(ls /sys/bus/virtio/drivers/virtio_net/*/net 2>/dev/null | head -1)
[ -n "$NIC" ] || { fail "a virtio NIC in the VM"; exit 1; }
sysctl -qw net.ipv6.conf."$NIC".disable_ipv6=1
ip addr add $IP/16 dev "$NIC" && ip link set "$NIC" up || { fail "address on $NIC"; exit 1; }

truncate -s ${MB}M "$W/disk"
S=$CFG/subsystems/$NQN
mkdir $S && echo 1 > $S/attr_allow_any_host && mkdir $S/namespaces/1 &&
  echo "$W/disk" > $S/namespaces/1/device_path && echo 1 > $S/namespaces/1/buffered_io &&
  echo 1 > $S/namespaces/1/enable || { fail "nvmet subsystem"; exit 1; }

# mbps BYTES SECONDS
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.1f", b / s / 1e6 }'; }

# run_case NAME TRANSPORT: export on TRANSPORT, connect, write and read the
# namespace; sets WRITE_<NAME> and READ_<NAME> (MB/s).
run_case() {
  local name=$1 tr=$2 dev t0 t1 t2
  mkdir $CFG/ports/1 && echo "$tr" > $CFG/ports/1/addr_trtype &&
    echo ipv4 > $CFG/ports/1/addr_adrfam && echo $IP > $CFG/ports/1/addr_traddr &&
    echo 4420 > $CFG/ports/1/addr_trsvcid && ln -s $S $CFG/ports/1/subsystems/$NQN ||
    { fail "$name: nvmet port"; return 1; }
  if ! timeout 90 nvme connect -t "$tr" -a $IP -s 4420 -n $NQN -i 1 -Q 64 \
      --hostnqn=$HOSTNQN >"$W/connect" 2>&1; then
    fail "$name: nvme connect"; sed 's/^/    /' "$W/connect"; teardown_target; return 1
  fi
  dev=
  for _ in $(seq 100); do
    dev=$(ls -d /sys/block/nvme*n1 2>/dev/null | grep -v '/nvme[0-9]*c' | head -1)
    [ -n "$dev" ] && [ -e "$dev/dev" ] && break
    sleep 0.1
  done
  rm -f "$W/nvdev"
  mknod "$W/nvdev" b $(tr ':' ' ' < "$dev/dev")
  t0=$(date +%s.%N)
  timeout 300 dd if=/dev/zero of="$W/nvdev" bs=1M count=$MB oflag=direct status=none ||
    fail "$name: write"
  t1=$(date +%s.%N)
  timeout 300 dd if="$W/nvdev" of=/dev/null bs=1M count=$MB iflag=direct status=none ||
    fail "$name: read"
  t2=$(date +%s.%N)
  eval "WRITE_$name=$(mbps $((MB << 20)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")"
  eval "READ_$name=$(mbps $((MB << 20)) "$(awk -v a="$t1" -v b="$t2" 'BEGIN { print b - a }')")"
  timeout 60 nvme disconnect -n $NQN >/dev/null 2>&1
  teardown_target
  eval "ok \"$name: ${MB} MiB written at \$WRITE_$name MB/s, read at \$READ_$name MB/s\""
}

# urdma: the device and its NIC agent on the VM's address.
rdma link add urdmab type urdma netdev "$NIC" || fail "rdma link add urdmab"
URDMA_ADDR=$IP "$U" agent --persist --open-all >"$W/agent" 2>&1 &
AGENT=$!
for _ in $(seq 100); do
  grep -q ACTIVE /sys/class/infiniband/urdmab/ports/1/state 2>/dev/null && break
  sleep 0.1
done
run_case urdma rdma
kill "$AGENT"; wait "$AGENT" 2>/dev/null; AGENT=
rdma link delete urdmab

# rxe on the same interface (it binds UDP 4791 once the agent is gone).
modprobe rdma_rxe && rdma link add rxeb type rxe netdev "$NIC" || fail "rdma link add rxeb"
run_case rxe rdma
rdma link delete rxeb
modprobe -r rdma_rxe

# NVMe/TCP on the same address.
run_case tcp tcp

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
ok "urdma/rxe: write $(ratio "${WRITE_urdma:-0}" "${WRITE_rxe:-0}"), read $(ratio "${READ_urdma:-0}" "${READ_rxe:-0}")"
ok "urdma/tcp: write $(ratio "${WRITE_urdma:-0}" "${WRITE_tcp:-0}"), read $(ratio "${READ_urdma:-0}" "${READ_tcp:-0}")"
exit $((failures > 0))
