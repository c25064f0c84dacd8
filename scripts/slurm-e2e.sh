#!/usr/bin/env bash
# `just slurm-e2e`: deploy/slurm/sweep.sbatch on a real Slurm, on this machine alone.
#
# Installs Slurm and MUNGE from the distribution if missing (Debian: slurm-wlm, munge), writes a
# one-node slurm.conf (this machine's CPUs, a 4-GPU GRES stub with no device files, so the
# script's --gpus-per-task=1 is scheduled unchanged), starts munged (unless one answers already),
# slurmctld and slurmd, and submits the script as a 4-task array whose tasks each start their own
# bench-scripted-server (SERVER_CMD). One task is SIGKILLed mid-shard and requeued: it must resume
# its shard (its records up to the kill kept byte for byte), and `bench merge --expect` of the 4
# shard directories must be complete. Every daemon it started is stopped on exit, whatever happens.
#
# Needs root (or passwordless sudo) for the daemons. Uses bench's debug build, made here if needed
# (CARGO_TARGET_DIR honoured). Env: SLURM_E2E_KEEP=1 keeps the work directory.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUDO=()
[[ $(id -u) == 0 ]] || SUDO=(sudo -n)
say() { printf '== %s\n' "$*" >&2; }
die() { printf 'slurm-e2e: %s\n' "$*" >&2; exit 1; }
started=$(date +%s)

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
    || ! command -v munged >/dev/null; then
    say "installing slurm-wlm and munge (apt-get)"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null \
        || { "${SUDO[@]}" apt-get update -qq && "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq slurm-wlm munge >/dev/null; }
fi
say "$(slurmctld -V)"

say "building bench and bench-scripted-server (debug)"
(cd "$repo" && cargo build --quiet --bin bench --bin bench-scripted-server)
bin=$(cd "$repo" && realpath "${CARGO_TARGET_DIR:-target}")/debug
[ -x "$bin/bench" ] && [ -x "$bin/bench-scripted-server" ] || die "no binaries in $bin"

work=$(mktemp -d "${TMPDIR:-/tmp}/slurm-e2e.XXXXXX")
chmod 755 "$work"
pids=()
munged_pid=
job=
cleanup() {
    local rc=$?
    set +e
    if [ -n "$job" ]; then
        scancel "$job" 2>/dev/null
        for _ in $(seq 75); do [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break; sleep 0.2; done
    fi
    for pid in "${pids[@]}"; do "${SUDO[@]}" kill "$pid" 2>/dev/null; done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do "${SUDO[@]}" kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    done
    if [ -n "$munged_pid" ]; then "${SUDO[@]}" kill "$munged_pid" 2>/dev/null; fi
    if [ "$rc" != 0 ]; then
        echo "slurm-e2e: FAILED (exit $rc); logs in $work" >&2
        for f in "$work"/log/*; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
    elif [ "${SLURM_E2E_KEEP:-0}" = 1 ]; then
        echo "slurm-e2e: kept $work" >&2
    else
        "${SUDO[@]}" rm -rf "$work"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- MUNGE: Slurm's daemons and clients authenticate through it.
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "munged already running: using it"
else
    say "starting munged"
    if [ ! -s /etc/munge/munge.key ]; then
        "${SUDO[@]}" runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
    fi
    "${SUDO[@]}" install -d -o munge -g munge -m 0755 /run/munge
    "${SUDO[@]}" runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    munged_pid=$(cat /run/munge/munged.pid)
    munge -n | unmunge >/dev/null || die "munged did not come up"
fi

# --- A one-node cluster. Its own ports, spool and state under $work, so nothing of a system
# Slurm is touched. proctrack/pgid: a killed task's server (in bench's process group) goes too.
# Everything on 127.0.0.1, so the host name need not resolve.
node=$(hostname -s)
hw=$(slurmd -C | head -n 1 | sed 's/^NodeName=[^ ]* //')
mkdir -p "$work/etc" "$work/state" "$work/spool" "$work/log" "$work/results"
cat >"$work/etc/slurm.conf" <<EOF
ClusterName=e2e
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
GresTypes=gpu
JobRequeue=1
KillWait=5
MinJobAge=600
NodeName=$node NodeAddr=127.0.0.1 $hw Gres=gpu:4 State=UNKNOWN
PartitionName=e2e Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
# A GPU GRES stub: Slurm drops a GPU without a device file, so 4 nodes of /dev/null's device
# (1,3) stand in for them (task/none binds nothing; the tasks use no GPU).
mkdir -p "$work/dev"
for i in 0 1 2 3; do "${SUDO[@]}" mknod "$work/dev/gpu$i" c 1 3; done
echo "NodeName=$node Name=gpu File=$work/dev/gpu[0-3]" >"$work/etc/gres.conf"
export SLURM_CONF=$work/etc/slurm.conf

say "starting slurmctld and slurmd ($node: $hw)"
"${SUDO[@]}" env SLURM_CONF="$SLURM_CONF" slurmctld -D -i -f "$SLURM_CONF" >"$work/log/slurmctld.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
"${SUDO[@]}" env SLURM_CONF="$SLURM_CONF" slurmd -D -f "$SLURM_CONF" >"$work/log/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 150); do
    state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.2
done
[ "$state" = idle ] || die "node $node is ${state:-unknown}, not idle"
sinfo >&2

# --- The array: the shipped script, unchanged, submitted from an unrelated directory with a
# relative SCENARIO (resolved against the repository by the script). On the command line only what
# this machine cannot give: 1 CPU a task instead of 8, logs in $work (appended across a requeue).
say "submitting deploy/slurm/sweep.sbatch as a 4-task array"
export BENCH=$bin/bench RESULTS=$work/results SCENARIO=deploy/slurm/e2e.toml
export SERVER_CMD="$bin/bench-scripted-server --port {port} --token-ms 25"
scenario=$repo/deploy/slurm/e2e.toml
job=$(cd "$work" && sbatch --parsable --array=0-3 --cpus-per-task=1 --time=00:15:00 --open-mode=append \
    --output="$work/log/task-%a.log" "$repo/deploy/slurm/sweep.sbatch")
job=${job%%;*}
say "job $job"

# --- Kill task 1 (shard 2/4) mid-shard: once it has records, before it has all of them.
victim=${job}_1
victim_state() { scontrol show job "$victim" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n 1; }
records=
for _ in $(seq 600); do
    records=$(ls "$work"/results/*-shard2of4/measurements.jsonl 2>/dev/null | head -n 1 || true)
    if [ -n "$records" ] && [ "$(grep -c . "$records" || true)" -ge 2 ]; then break; fi
    records=
    sleep 0.2
done
[ -n "$records" ] || die "task 1 wrote no records in 120 s"
[ "$(victim_state)" = RUNNING ] || die "task 1 finished before it could be killed: make its cells longer"
scancel --batch --signal=KILL "$victim"
for _ in $(seq 150); do
    case $(victim_state) in RUNNING | COMPLETING) sleep 0.2 ;; *) break ;; esac
done
run=$(dirname "$records")
kept=$(grep -c . "$records")
# What was on disk when the task died, up to its last whole line: the resumed task must keep it.
head -n "$kept" "$records" >"$work/at-kill.jsonl"
say "killed $victim (SIGKILL) mid-shard: $(victim_state), $kept records in $(basename "$run")"

# Requeued, the task runs again under the same array job id, so RUN_ID and its directory are the
# same and the script resumes it. Slurm holds a requeued job back for a while (BeginTime); it is
# released here after 3 s: slurmd revokes the killed instance's credential with a timestamp in
# seconds, and a relaunch within that second is refused ("Job credential revoked").
scontrol requeue "$victim"
sleep 3
scontrol update jobid="$victim" StartTime=now
say "requeued $victim"

for _ in $(seq 1500); do
    [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break
    sleep 0.4
done
[ -z "$(squeue -h -j "$job")" ] || die "the array did not finish in 10 minutes"
field() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" | head -n 1; }
for t in 0 1 2 3; do
    info=$(scontrol show job "${job}_$t")
    state=$(field JobState <<<"$info") exit_code=$(field ExitCode <<<"$info") restarts=$(field Restarts <<<"$info")
    echo "task $t: $state, exit $exit_code, requeued $restarts time(s)"
    [ "$state" = COMPLETED ] && [ "$exit_code" = 0:0 ] || die "task $t ended $state (exit $exit_code)"
done

say "task 1's log (both attempts)"
grep -E '^(shard [0-9]/[0-9]: |resuming: |slurmstepd)' "$work/log/task-1.log"
grep -q '^shard 2/4: starting ' "$work/log/task-1.log" || die "task 1 did not start shard 2/4"
grep -q '^shard 2/4: resuming ' "$work/log/task-1.log" || die "task 1 was not resumed"
head -n "$kept" "$records" | cmp -s - "$work/at-kill.jsonl" \
    || die "the resumed shard lost or changed records written before the kill"
say "shard 2/4 kept its $kept records from before the kill and has $(grep -c . "$records") now; run.json: $(
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["status"] + ",", "resumed", len(d["resumed_at"]), "time(s)")' \
        "$run/run.json")"

say "bench merge --expect"
"$bin/bench" merge "$work"/results/*-shard*of4 -o "$work/merged.json" --expect "$scenario"
echo "slurm-e2e: passed in $(( $(date +%s) - started )) s" >&2
