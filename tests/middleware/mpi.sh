# Open MPI and MPICH jobs of 4 ranks, two in each network namespace, on
# urdma (`urdma run` around every rank; Open MPI with its UCX layer, which
# Debian's /etc/openmpi/openmpi-mca-params.conf turns off, turned on with
# `--mca pml ucx`; MPICH's ch4:ucx uses UCX as it is), beside the same job
# over TCP (Open MPI's tcp btl, UCX's tcp transport for MPICH). Each job
# runs tests/middleware/mpi/mpi_check.c: a timed ping-pong and stream
# between the two hosts and checked collectives. Needs root (namespaces).
# Sourced by tests/middleware/run.

MPI_DIR=$HERE/mpi
MPI_LIMIT=${URDMA_MPI_TIMEOUT:-90}

# mpi_build FLAVOR: mpi_check for Open MPI (openmpi) or MPICH (mpich).
mpi_build() {
    "mpicc.$1" -O2 -Wall -o "$LOGS/mpi_check_$1" "$MPI_DIR/mpi_check.c" \
        >"$LOGS/mpi_build_$1.log" 2>&1
}

# mpi_job NAME FLAVOR CARRIER: a 4-rank job of FLAVOR, launched from
# NS_A, over urdma or tcp; its output in $LOGS/NAME.log.
mpi_job() {
    local name=$1 flavor=$2 carrier=$3 log=$LOGS/$1.log
    local prog=$LOGS/mpi_check_$flavor launch=$MPI_DIR/netns-launch
    local a=$NS_A_ADDR b=$NS_B_ADDR cmd=()
    [ "$carrier" = urdma ] && prog="$URDMA run -- $prog"
    case $flavor in
    openmpi)
        cmd=(mpirun.openmpi --allow-run-as-root --mca plm_rsh_agent "$launch"
            --host "$a:2,$b:2" -np 4)
        if [ "$carrier" = urdma ]; then
            cmd+=(--mca pml ucx)
        else
            cmd+=(--mca pml ob1 --mca btl tcp,vader,self)
        fi
        ;;
    mpich)
        cmd=(mpirun.mpich -launcher ssh -launcher-exec "$launch"
            -hosts "$a:2,$b:2" -np 4)
        [ "$carrier" = tcp ] && cmd=(env UCX_TLS=tcp,sm,self "${cmd[@]}")
        ;;
    esac
    # The launching host is a namespace with a name and IPC of its own,
    # as the others are (netns-launch).
    URDMA_MW_HOSTS="$a=$NS_A $b=$NS_B" timeout -k 5 "$MPI_LIMIT" \
        ip netns exec "$NS_A" unshare --uts --ipc \
        sh -c "hostname mw-$NS_A && exec $(printf '%q ' "${cmd[@]}") $prog" >"$log" 2>&1
}

mpi_case() {
    local flavor=$1 what=$2 rc line
    local name=mpi_${flavor}
    if ! mpi_build "$flavor"; then
        bad "$what: mpicc" "$LOGS/mpi_build_$flavor.log"
        return
    fi
    local t0 before moved
    t0=$(date +%s)
    before=$(carried "$NS_B_ADDR" "$t0" "$NS_B")
    mpi_job "$name" "$flavor" urdma
    rc=$?
    moved=$(moved "$NS_B_ADDR" "$t0" "$NS_B" "$before" $((64 << 20)))
    line=$(grep -m1 '^mpi_check: 4 ranks' "$LOGS/$name.log")
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        bad "$what, 4 ranks on urdma across the veth (exit $rc)" "$LOGS/$name.log"
    elif [ "$moved" -lt $((64 << 20)) ]; then
        # The stream alone is 64 MiB into the second host.
        bad "$what: only $moved bytes went over urdma at $NS_B_ADDR" "$LOGS/$name.log"
    else
        ok "$what, 4 ranks on urdma across the veth: data checked"
        mpi_figures "$what" urdma "$line"
    fi
    mpi_job "${name}_tcp" "$flavor" tcp
    line=$(grep -m1 '^mpi_check: 4 ranks' "$LOGS/${name}_tcp.log")
    if [ -n "$line" ]; then
        mpi_figures "$what" tcp "$line"
    else
        figure "$what" "over TCP" "no result" "(see ${name}_tcp.log)"
    fi
}

# mpi_figures WHAT CARRIER LINE: the figures of an mpi_check line.
mpi_figures() {
    local lat bw
    lat=$(sed -E 's/.*latency ([0-9.]+) us.*/\1/' <<<"$3")
    bw=$(sed -E 's/.*bandwidth ([0-9.]+) MB\/s.*/\1/' <<<"$3")
    figure "$1" "8 B half round trip, $2" "$lat" us
    figure "$1" "1 MiB stream, $2" "$bw" MB/s
}

if [ "$HAVE_NETNS" = 1 ]; then
    mpi_case openmpi "Open MPI (UCX)"
    mpi_case mpich "MPICH (ch4:ucx)"
else
    bad "mpi: needs root for the namespaces"
fi
