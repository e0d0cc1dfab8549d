#!/bin/bash
# Guest test: NVMe over Fabrics across urdma. The kernel's NVMe target
# (nvmet, RDMA transport) exports a file-backed namespace on a urdma
# device of the VM's virtio NIC, and the kernel's NVMe host connects to it
# there with `nvme connect -t rdma`: both are kernel consumers of urdma.ko
# (kernel RC QPs held by the NIC agent, DMA and fast-registration MRs,
# SEND with invalidate), and every byte goes through the agent as RoCE v2.
# A file system is made on the remote namespace, files are written and
# read back after a remount with checksums, then the host disconnects and
# the kernel log must be clean. Prints "ok - nvmeof: NAME" /
# "FAIL - nvmeof: NAME" per check.
set -u
U=${URDMA:?URDMA names the urdma binary}
KO=${URDMA_KO:-/share/urdma.ko}
IP=169.254.74.1
NQN=nqn.2026-11.io.urdma:test
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:0f8e8a52-5b0c-4c4e-9d3a-3f0e1b7c2a11
HOSTID=0f8e8a52-5b0c-4c4e-9d3a-3f0e1b7c2a11
CFG=/sys/kernel/config/nvmet
W=$(mktemp -d)
failures=0
ok() { echo "ok - nvmeof: $*"; }
fail() { echo "FAIL - nvmeof: $*"; failures=$((failures + 1)); }

cleanup() {
  umount "$W/mnt" 2>/dev/null
  timeout 30 nvme disconnect -n $NQN >/dev/null 2>&1
  rm -f $CFG/ports/1/subsystems/$NQN 2>/dev/null
  rmdir $CFG/ports/1 2>/dev/null
  echo 0 > $CFG/subsystems/$NQN/namespaces/1/enable 2>/dev/null
  rmdir $CFG/subsystems/$NQN/namespaces/1 $CFG/subsystems/$NQN 2>/dev/null
  [ -n "${AGENT:-}" ] && kill "$AGENT" 2>/dev/null
  sleep 0.5
  rdma link delete urdman 2>/dev/null
  if [ -n "${NIC:-}" ]; then
    ip addr flush dev "$NIC" 2>/dev/null
    ip link set "$NIC" down 2>/dev/null
  fi
  modprobe -r nvme_rdma nvmet_rdma 2>/dev/null
  rmmod urdma 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT

# rxe holds UDP 4791 of the root namespace while it is loaded.
modprobe -r rdma_rxe 2>/dev/null
modprobe ib_uverbs && modprobe rdma_cm || { fail "modules ib_uverbs, rdma_cm load"; exit 1; }
lsmod | grep -q '^urdma ' || insmod "$KO" || { fail "urdma.ko loads"; exit 1; }
modprobe virtio_net && modprobe nvmet_rdma && modprobe nvme_rdma ||
  { fail "modules nvmet_rdma, nvme_rdma load"; exit 1; }
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
NIC=$(ls /sys/bus/virtio/drivers/virtio_net/*/net 2>/dev/null | head -1)
[ -n "$NIC" ] || { fail "a virtio NIC in the VM"; exit 1; }
sysctl -qw net.ipv6.conf."$NIC".disable_ipv6=1
ip addr add $IP/16 dev "$NIC" && ip link set "$NIC" up &&
  rdma link add urdman type urdma netdev "$NIC" || { fail "rdma link add urdman"; exit 1; }
dmesg -C

# start_agent: the NIC agent of urdman; true once the port is ACTIVE.
start_agent() {
  URDMA_ADDR=$IP URDMA_LOG=urdma=info "$U" agent --persist --open-all >>"$W/agent" 2>&1 &
  AGENT=$!
  for _ in $(seq 100); do
    grep -q ACTIVE /sys/class/infiniband/urdman/ports/1/state 2>/dev/null && return 0
    sleep 0.1
  done
  sed 's/^/    agent: /' "$W/agent" | tail -5
  return 1
}
if start_agent; then ok "the NIC agent brings urdman up"; else fail "the NIC agent brings urdman up"; exit 1; fi

# The target: a 64 MiB file behind namespace 1, on port 4420 of urdman.
truncate -s 64M "$W/disk"
S=$CFG/subsystems/$NQN
mkdir $S && echo 1 > $S/attr_allow_any_host && mkdir $S/namespaces/1 &&
  echo "$W/disk" > $S/namespaces/1/device_path && echo 1 > $S/namespaces/1/buffered_io &&
  echo 1 > $S/namespaces/1/enable && mkdir $CFG/ports/1 &&
  echo rdma > $CFG/ports/1/addr_trtype && echo ipv4 > $CFG/ports/1/addr_adrfam &&
  echo $IP > $CFG/ports/1/addr_traddr && echo 4420 > $CFG/ports/1/addr_trsvcid &&
  ln -s $S $CFG/ports/1/subsystems/$NQN
if dmesg | grep -q "enabling port 1 (${IP}:4420)"; then
  ok "nvmet exports a namespace over RDMA on urdman"
else
  fail "nvmet exports a namespace over RDMA on urdman"; dmesg | tail -5 | sed 's/^/    /'
fi

# The host connects across urdma.
t0=$(date +%s)
if timeout 90 nvme connect -t rdma -a $IP -s 4420 -n $NQN -i 1 -Q 32 \
    --reconnect-delay=1 --ctrl-loss-tmo=120 \
    --hostnqn=$HOSTNQN --hostid=$HOSTID >"$W/connect" 2>&1; then
  ok "nvme connect -t rdma to $IP:4420 ($(($(date +%s) - t0)) s)"
else
  fail "nvme connect -t rdma to $IP:4420"
  sed 's/^/    /' "$W/connect"; dmesg | tail -15 | sed 's/^/    /'
  sed "s/^/    agent: /" "$W/agent" | tail -10
  exit 1
fi
# The namespace's block device (the VM has no other NVMe device; its /dev
# may have no node for it, so one is made from sysfs).
DEV=
for _ in $(seq 100); do
  DEV=$(ls -d /sys/block/nvme*n1 2>/dev/null | grep -v '/nvme[0-9]*c' | head -1)
  [ -n "$DEV" ] && [ -e "$DEV/dev" ] && break
  sleep 0.1
done
if [ -n "$DEV" ]; then
  N=${DEV##*/}
  [ -b "/dev/$N" ] || mknod "$W/$N" b $(tr ':' ' ' < "$DEV/dev")
  [ -b "/dev/$N" ] && DEV=/dev/$N || DEV=$W/$N
fi
if [ -b "$DEV" ]; then
  ok "the remote namespace is $DEV"
else
  fail "a block device for the remote namespace"; ls /sys/block /sys/class/nvme | sed 's/^/    /'
  dmesg | tail -20 | sed 's/^/    /'; sed "s/^/    agent: /" "$W/agent" | tail -10
  exit 1
fi

# The kernel QPs are the RDMA core's objects like any other.
rdma resource show qp link urdman/1 > "$W/res" 2>&1
n=$(grep -c "type RC state RTS .*comm \[rdma_cm\]" "$W/res")
if [ "$n" -eq 4 ]; then
  ok "rdma resource show qp lists the 4 kernel RC QPs (host and target, admin and I/O queue)"
else
  fail "rdma resource show qp lists the 4 kernel RC QPs ($n)"; sed 's/^/    /' "$W/res"
fi

# A file system on the remote namespace; files written, read back after
# a remount (the page cache dropped), with checksums.
mkdir -p "$W/mnt"
if timeout 120 mkfs.ext4 -q -F "$DEV" && timeout 60 mount "$DEV" "$W/mnt"; then
  ok "mkfs.ext4 and mount on $DEV"
else
  fail "mkfs.ext4 and mount on $DEV"; dmesg | tail -10 | sed 's/^/    /'; exit 1
fi
head -c $((8 << 20)) /dev/urandom > "$W/big"
head -c 12345 /dev/urandom > "$W/small"
cp "$W/big" "$W/small" "$W/mnt/" && sync
want=$(cd "$W" && md5sum big small)
umount "$W/mnt" && echo 3 > /proc/sys/vm/drop_caches &&
  timeout 60 mount "$DEV" "$W/mnt" || fail "remount $DEV"
got=$(cd "$W/mnt" && timeout 60 md5sum big small)
if [ -n "$got" ] && [ "$got" = "$want" ]; then
  ok "8 MiB and 12345-byte files read back with the same MD5 after a remount"
else
  fail "files read back after a remount"; echo "    want: $want"; echo "    got: $got"
fi
umount "$W/mnt"

# The NIC agent dies under the connection: the kernel QPs it held are lost
# (their work flushed, a fatal event each), the port goes down and the
# host starts reconnecting. A new agent brings the port up; the host
# reconnects and the files read back the same.
CTRL=$(ls -d /sys/class/nvme/nvme* | head -1)
kill -9 "$AGENT"
for _ in $(seq 100); do
  grep -q DOWN /sys/class/infiniband/urdman/ports/1/state && break
  sleep 0.1
done
for _ in $(seq 200); do
  [ "$(cat "$CTRL/state" 2>/dev/null)" != live ] && break
  sleep 0.1
done
st=$(cat "$CTRL/state" 2>/dev/null)
if grep -q DOWN /sys/class/infiniband/urdman/ports/1/state && [ "$st" != live ]; then
  ok "a killed agent takes urdman down and the host leaves the live state ($st)"
else
  fail "a killed agent takes urdman down and the host leaves the live state ($st)"
fi
if start_agent; then ok "a new agent brings urdman up"; else fail "a new agent brings urdman up"; fi
t0=$(date +%s)
for _ in $(seq 600); do
  [ "$(cat "$CTRL/state" 2>/dev/null)" = live ] && break
  sleep 0.1
done
st=$(cat "$CTRL/state" 2>/dev/null)
if [ "$st" = live ]; then
  ok "the host reconnects through the new agent ($(($(date +%s) - t0)) s)"
else
  fail "the host reconnects through the new agent (state $st)"; dmesg | tail -10 | sed 's/^/    /'
fi
got=$(timeout 60 mount "$DEV" "$W/mnt" && cd "$W/mnt" && timeout 60 md5sum big small)
if [ -n "$got" ] && [ "$got" = "$want" ]; then
  ok "the files read back the same after the reconnection"
else
  fail "the files read back the same after the reconnection"
fi
umount "$W/mnt" 2>/dev/null

# The module cannot go while a NIC holds its file; once the agent is gone
# it unloads, and the controller that used its device goes with it.
if rmmod urdma 2>/dev/null; then
  fail "rmmod urdma is refused while the agent holds /dev/urdma"
else
  ok "rmmod urdma is refused while the agent holds /dev/urdma"
fi
if timeout 60 nvme disconnect -n $NQN >"$W/disc" 2>&1 && grep -q "disconnected 1" "$W/disc"; then
  ok "nvme disconnect"
else
  fail "nvme disconnect"; sed 's/^/    /' "$W/disc"
fi
timeout 90 nvme connect -t rdma -a $IP -s 4420 -n $NQN -i 1 -Q 32 \
  --reconnect-delay=1 --ctrl-loss-tmo=5 \
  --hostnqn=$HOSTNQN --hostid=$HOSTID >"$W/connect" 2>&1 || fail "nvme connect again"
kill "$AGENT"
for _ in $(seq 50); do kill -0 "$AGENT" 2>/dev/null || break; sleep 0.1; done
rm -f $CFG/ports/1/subsystems/$NQN
if timeout 30 rmmod urdma && ! lsmod | grep -q '^urdma '; then
  ok "rmmod urdma once the agent is gone, a controller reconnecting"
else
  fail "rmmod urdma once the agent is gone, a controller reconnecting"
fi
for _ in $(seq 150); do
  ls /sys/class/nvme/ 2>/dev/null | grep -q nvme || break
  sleep 0.1
done
if ls /sys/class/nvme/ 2>/dev/null | grep -q nvme; then
  fail "the controller gives up after its loss timeout"
else
  ok "the controller gives up after its loss timeout"
fi
if dmesg | grep -Eiq "WARNING|BUG|leak|Call Trace"; then
  fail "the kernel log is clean"; dmesg | grep -Ei -A5 "WARNING|BUG|leak|Call Trace" | head -20 | sed 's/^/    /'
else
  ok "the kernel log is clean"
fi
exit $((failures > 0))
