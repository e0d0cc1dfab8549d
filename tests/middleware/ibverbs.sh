# The `ibverbs` crate from crates.io: its own `loopback` example, built
# unmodified from the crate's published source, and
# tests/middleware/ibverbs-crate (a 64 KiB ping-pong on the crate's
# default QP attributes) between two addresses of this host and across
# the veth. Needs cargo, cmake, clang and libnl (ibverbs-sys configures
# its rdma-core copy to generate its bindings). Sourced by
# tests/middleware/run.

IBV_DIR=$HERE/ibverbs-crate
IBV_TARGET=$ROOT/target/ibverbs-crate

ibverbs_build() {
    local log=$LOGS/ibverbs_build.log
    CARGO_TARGET_DIR=$IBV_TARGET cargo build --release --locked -q \
        --manifest-path "$IBV_DIR/Cargo.toml" >"$log" 2>&1 || return 1
    # The crate's published source, as cargo fetched it for the build
    # above; its example built as it is.
    local src
    src=$(CARGO_TARGET_DIR=$IBV_TARGET cargo metadata --format-version 1 --locked \
        --manifest-path "$IBV_DIR/Cargo.toml" 2>>"$log" | python3 -c '
import json, sys
m = json.load(sys.stdin)
print(next(p["manifest_path"] for p in m["packages"] if p["name"] == "ibverbs"))')
    [ -f "$src" ] || return 1
    rm -rf "$IBV_TARGET/crate" && mkdir -p "$IBV_TARGET/crate" &&
        cp -r "$(dirname "$src")" "$IBV_TARGET/crate/ibverbs" || return 1
    CARGO_TARGET_DIR=$IBV_TARGET cargo build --release -q --example loopback \
        --manifest-path "$IBV_TARGET/crate/ibverbs/Cargo.toml" >>"$log" 2>&1
}

# ibverbs_pair NAME SERVER_PREFIX CLIENT_PREFIX HOST: the ping-pong, server
# and client each run under their prefix (an `ip netns exec` or nothing).
ibverbs_pair() {
    local name=$1 sp=$2 cp=$3 host=$4 port=$((19600 + RANDOM % 300))
    local prog=$IBV_TARGET/release/ibverbs-crate-pingpong
    local slog=$LOGS/$name.server.log clog=$LOGS/$name.client.log
    # shellcheck disable=SC2086
    $sp timeout -k 5 "$LIMIT" "$URDMA" run $IBV_SADDR -- "$prog" server "$port" >"$slog" 2>&1 &
    local spid=$!
    sleep 1
    # shellcheck disable=SC2086
    $cp timeout -k 5 "$LIMIT" "$URDMA" run $IBV_CADDR -- "$prog" client "$host" "$port" 1000 >"$clog" 2>&1
    local crc=$?
    wait "$spid"
    local src=$? line
    line=$(grep -m1 '^pingpong: 1000 rounds' "$clog")
    if [ $crc -ne 0 ] || [ $src -ne 0 ] || [ -z "$line" ]; then
        bad "$name (server exit $src, client exit $crc)" "$slog" "$clog"
    else
        ok "$name: 1000 checked 64 KiB round trips"
        figure "ibverbs crate ping-pong" "64 KiB half round trip, $5" \
            "$(sed -E 's/.*, ([0-9.]+) us half.*/\1/' <<<"$line")" us
    fi
}

if ibverbs_build; then
    # On a device of a real link (the veth), whose GID table is laid out
    # as rxe's: the link-local IPv6 GID, then the IPv4 one at index 1.
    if [ "$HAVE_NETNS" = 1 ]; then
        if in_ns "$NS_A" timeout -k 5 "$LIMIT" "$URDMA" run -- \
            "$IBV_TARGET/release/examples/loopback" >"$LOGS/loopback.log" 2>&1 &&
            grep -qx sent "$LOGS/loopback.log" && grep -qx received "$LOGS/loopback.log"; then
            ok "ibverbs crate: its loopback example (GID index 1)"
        else
            bad "ibverbs crate: its loopback example (GID index 1)" "$LOGS/loopback.log"
        fi
    fi
    IBV_SADDR="--addr 127.0.0.2" IBV_CADDR="--addr 127.0.0.1" \
        ibverbs_pair "ibverbs crate ping-pong, two addresses" "" "" 127.0.0.2 "two addresses"
    if [ "$HAVE_NETNS" = 1 ]; then
        IBV_SADDR="" IBV_CADDR="" ibverbs_pair "ibverbs crate ping-pong across the veth" \
            "ip netns exec $NS_B" "ip netns exec $NS_A" "$NS_B_ADDR" "veth"
    fi
else
    bad "ibverbs crate: build" "$LOGS/ibverbs_build.log"
fi
