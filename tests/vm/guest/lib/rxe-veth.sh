# Sourced by the guest tests that put Linux Soft-RoCE in the root namespace
# at one end of a veth and urdma in a namespace of its own at the other
# (rxe binds UDP 4791 of the root namespace, so the two cannot share one).
# The sourcing script sets NS, IP_R, IP_U, DEV_R, DEV_U and RXE (the rxe
# device's name) and defines fail().

# rxe_veth_up: load the modules, make the namespace, the veth and the rxe
# device; 1 (with a FAIL line) if any step fails.
rxe_veth_up() {
  modprobe veth && modprobe rdma_rxe && modprobe rdma_ucm ||
    { fail "modules veth, rdma_rxe and rdma_ucm load"; return 1; }
  ip netns add $NS &&
    ip link add $DEV_R type veth peer name $DEV_U netns $NS &&
    ip addr add $IP_R/24 dev $DEV_R && ip link set $DEV_R up &&
    ip -n $NS addr add $IP_U/24 dev $DEV_U && ip -n $NS link set $DEV_U up &&
    ip -n $NS link set lo up || { fail "veth between the root namespace and $NS"; return 1; }
  rdma link add $RXE type rxe netdev $DEV_R || { fail "rdma link add $RXE"; return 1; }
  busybox ping -c 1 -W 5 $IP_U >/dev/null 2>&1 || fail "ping $IP_U from the root namespace"
  return 0
}

# rxe_veth_down: kill what runs in the namespace, remove the rxe device,
# the veth and the namespace, and unload rxe (it holds UDP 4791 of the
# root namespace while loaded: leave the port to the scripts that run
# next).
rxe_veth_down() {
  local p
  for p in $(ip netns pids $NS 2>/dev/null); do
    kill -9 "$p" 2>/dev/null
  done
  rdma link delete $RXE 2>/dev/null
  ip link del $DEV_R 2>/dev/null
  ip netns del $NS 2>/dev/null
  modprobe -r rdma_ucm rdma_rxe 2>/dev/null
}

# rxe_listening PORT: rxe's rdma_cm listens on PORT (any address; rdma
# resource cm_id); 1 after 20 s if it does not.
rxe_listening() {
  local i
  for i in $(seq 1 100); do
    rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN.*src-addr [^ ]*:$1 " && return 0
    sleep 0.2
  done
  return 1
}

# urdma_device_up: the NIC agent of the namespace has bound UDP 4791 (a
# program opened the device); 1 after 20 s if it has not.
urdma_device_up() {
  local i
  for i in $(seq 1 100); do
    ip netns exec $NS cat /proc/net/udp | awk '$2 ~ /:12B7$/ { f = 1 } END { exit !f }' && return 0
    sleep 0.2
  done
  return 1
}

# show FILE...: the last lines of each file, indented.
show() {
  local f
  for f in "$@"; do
    sed "s/^/    ${f##*/}: /" "$f" | tail -8
  done
}
