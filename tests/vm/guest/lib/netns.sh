# Sourced by the guest scripts: two network namespaces joined by a veth
# pair, with link-local addresses only (169.254.0.0/16).
NS_S=urdma-srv
NS_C=urdma-cli
IP_S=169.254.77.1
IP_C=169.254.77.2

# Create the namespaces and the veth pair (ve-s in $NS_S, ve-c in $NS_C).
netns_setup() {
  modprobe veth && modprobe sch_netem &&
    ip netns add $NS_S && ip netns add $NS_C &&
    ip link add ve-s type veth peer name ve-c &&
    ip link set ve-s netns $NS_S && ip link set ve-c netns $NS_C &&
    ip -n $NS_S addr add $IP_S/16 dev ve-s && ip -n $NS_C addr add $IP_C/16 dev ve-c &&
    ip -n $NS_S link set lo up && ip -n $NS_S link set ve-s up &&
    ip -n $NS_C link set lo up && ip -n $NS_C link set ve-c up
}

# Kill what still runs in the namespaces and delete them (and the pair).
netns_cleanup() {
  local ns p
  for ns in $NS_S $NS_C; do
    for p in $(ip netns pids $ns 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del $ns 2>/dev/null
  done
}

# netem SPEC...: the same netem qdisc on both ends ("none": no qdisc).
netem() {
  local ns dev
  for ns in $NS_S $NS_C; do
    if [ $ns = $NS_S ]; then dev=ve-s; else dev=ve-c; fi
    tc -n $ns qdisc del dev $dev root 2>/dev/null
    if [ "$1" != none ]; then
      tc -n $ns qdisc add dev $dev root netem "$@" limit 100000 || return 1
    fi
  done
}

# Milliseconds since $1 (an $EPOCHREALTIME value).
ms_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }
