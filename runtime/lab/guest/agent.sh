#!/bin/sh
# agent.sh: runs one ladder plan inside a guest (vng lab, busybox initramfs) or on a sched_ext host.
#
# Usage: agent.sh OUT          (OUT holds plan.sh, written by `threadwise ladder`; results go there too)
#
# The agent only runs commands and writes raw files (layout: docs/refine.md, "The ladder"); the host
# parses, judges and stores them, so the same agent serves every kind of guest. POSIX sh only: it
# must run under busybox ash as well as dash. plan.sh defines the workload's commands as functions
# (service_cmd, load_cmd, ready_cmd, prepare_cmd) and variables, then calls the steps below in order:
#   service_start | attach ARM STEP_MS | cell IDX ARM LEVEL REPEAT | trace_cell IDX ARM LEVEL REPEAT
#   | detach ARM | service_stop
set -u
OUT=${1:?usage: agent.sh OUT}
cd "$OUT" || exit 97
LOG="$OUT/agent.log"
SVC_PID=""
SCX_PID=""
ATTACHED=""   # the profile arm attached now (empty: none; baseline cells run unattached)
TRACING=""    # set while a trace cell runs: the libbpf tracer ($TRACER) is live over its window
TPID=""

say() { echo "agent: [$(cut -d" " -f1 /proc/uptime)] $*" >> "$LOG"; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }
sched_state() {
    st=$(cat /sys/kernel/sched_ext/state 2>/dev/null || echo absent)
    ops=$(cat /sys/kernel/sched_ext/root/ops 2>/dev/null || echo -)
    echo "$st $ops"
}

# The process ids whose comm starts with $TARGET (scx_layered's PcommPrefix).
# `read`, a shell builtin, not $(cat ...): a fork per process cost the profile cells' mid-window
# probe 10-35% of the feeder's wait in traced lab cells (blockers.py rows `cat`, `sh`).
target_pids() {
    for d in /proc/[0-9]*; do
        read -r c < "$d/comm" 2>/dev/null || continue
        case "$c" in "$TARGET"*) echo "${d#/proc/}" ;; esac
    done
}

# tid comm of every thread of the target processes.
target_threads() {
    for p in $(target_pids); do
        for t in /proc/"$p"/task/[0-9]*; do
            read -r c < "$t/comm" 2>/dev/null && echo "$p ${t##*/} $c"
        done
    done
}

service_start() {
    say "service: starting"
    service_cmd > "$OUT/service.log" 2> "$OUT/service.err" < /dev/null &
    SVC_PID=$!
    echo "$SVC_PID" > "$OUT/service.pid"
    t0=$(date +%s)
    while :; do
        if ! kill -0 "$SVC_PID" 2>/dev/null; then
            say "service: exited before it was ready"; echo "service-died" > "$OUT/failed"; exit 3
        fi
        if ready_cmd > /dev/null 2>&1; then break; fi
        if [ $(( $(date +%s) - t0 )) -ge "$READY_TIMEOUT" ]; then
            say "service: not ready after $READY_TIMEOUT s"; echo "service-not-ready" > "$OUT/failed"; exit 3
        fi
        sleep 0.2
    done
    say "service: ready (pid $SVC_PID) after $(( $(date +%s) - t0 )) s"
    [ -n "${PREPARE_TIMEOUT:-}" ] && service_prepare
    return 0
}

# The workload's [service] prepare (plan.sh's prepare_cmd, e.g. `sysbench ... prepare`): once, when the
# service is ready, before any cell; it must exit 0 within PREPARE_TIMEOUT.
service_prepare() {
    say "service: preparing"
    t0=$(date +%s)
    prepare_cmd > "$OUT/prepare.log" 2> "$OUT/prepare.err" < /dev/null &
    prep_pid=$!
    while kill -0 "$prep_pid" 2>/dev/null; do
        if [ $(( $(date +%s) - t0 )) -ge "$PREPARE_TIMEOUT" ]; then
            kill -KILL "$prep_pid" 2>/dev/null; wait "$prep_pid" 2>/dev/null
            say "service: prepare not done after $PREPARE_TIMEOUT s"; echo "service-prepare-failed" > "$OUT/failed"; exit 3
        fi
        sleep 0.2
    done
    if ! wait "$prep_pid"; then
        say "service: prepare failed"; tail -3 "$OUT/prepare.err" >> "$LOG"; echo "service-prepare-failed" > "$OUT/failed"; exit 3
    fi
    say "service: prepared after $(( $(date +%s) - t0 )) s"
}

service_stop() {
    [ -n "$SVC_PID" ] || return 0
    kill -TERM "$SVC_PID" 2>/dev/null
    i=0
    while kill -0 "$SVC_PID" 2>/dev/null && [ "$i" -lt $((STOP_TIMEOUT * 5)) ]; do sleep 0.2; i=$((i + 1)); done
    kill -KILL "$SVC_PID" 2>/dev/null
    wait "$SVC_PID" 2>/dev/null
    SVC_PID=""
    say "service: stopped"
}

# attach ARM STEP_MS: start scx_layered with arms/ARM.json; wait for the kernel to say it is
# attached, then for its first userspace step (STEP_MS, its --interval, after it started running).
attach() {
    say "attach $1: starting"
    t0=$(date +%s)
    if [ "$ATTACH_MODE" = runtime ]; then
        # arms/ARM.args: the profile's scx_layered flags ([scheduler]), one per line, no spaces;
        # arms/ARM.hints.json: its title groups, which the runtime hints (runtime/hints.py)
        hint_plan=""
        [ -f "$OUT/arms/$1.hints.json" ] && hint_plan="--hint-plan=$OUT/arms/$1.hints.json"
        # shellcheck disable=SC2046,SC2086
        if ! threadwise apply "$OUT/arms/$1.json" --attach-timeout "$ATTACH_TIMEOUT" \
                $(sed 's/^/--scx-arg=/' "$OUT/arms/$1.args" 2>/dev/null) $hint_plan \
                > "$OUT/arms/$1.apply.log" 2>&1; then
            say "attach $1: FAILED"; cat "$OUT/arms/$1.apply.log" >> "$LOG"; echo "attach-$1" > "$OUT/failed"; exit 4
        fi
    else
        # arms/ARM.args: the profile's scx_layered flags ([scheduler]), one per line, no spaces.
        # It loads at nice -20 (the subshell renices itself, then becomes scx_layered): its load,
        # mostly the kernel's verifier, competes with the workload's busy threads, and beside
        # rolesim or a JVM it took 15-34 s under TCG against 10-12 s beside an idle Redis. Once
        # attached every thread of it is back at nice 0 (`unnice`), so the cells measure
        # scx_layered as `threadwise apply` runs it.
        # shellcheck disable=SC2046
        ( read -r me _ < /proc/self/stat; renice -20 -p "$me" > /dev/null 2>&1
          exec "$SCX" --enable-match-debug $(cat "$OUT/arms/$1.args" 2>/dev/null) "f:$OUT/arms/$1.json" ) \
            > "$OUT/arms/$1.scx.log" 2>&1 &
        SCX_PID=$!
        while [ "$(cat /sys/kernel/sched_ext/state 2>/dev/null)" != enabled ]; do
            if ! kill -0 "$SCX_PID" 2>/dev/null || [ $(( $(date +%s) - t0 )) -ge "$ATTACH_TIMEOUT" ]; then
                say "attach $1: FAILED"; tail -5 "$OUT/arms/$1.scx.log" >> "$LOG"
                kill -INT "$SCX_PID" 2>/dev/null; echo "attach-$1" > "$OUT/failed"; exit 4
            fi
            sleep 0.5
        done
        # its main loop starts once init has printed this (main.rs, just before `run`)
        i=0
        while ! grep -q "Scheduler Attached" "$OUT/arms/$1.scx.log" 2>/dev/null && [ "$i" -lt 100 ]; do
            sleep 0.2; i=$((i + 1))
        done
        unnice "$SCX_PID"
    fi
    running_at=$(uptime_s)
    echo "$(( $(date +%s) - t0 ))" > "$OUT/arms/$1.attach_s"
    ATTACHED=$1
    say "attach $1: attached after $(cat "$OUT/arms/$1.attach_s") s ($(sched_state))"
    settle "$1"
    first_step "$1" "${2:-100}" "$running_at"
}

# first_step ARM STEP_MS SINCE: sleep until STEP_MS (+ 1 s for a slow guest) have passed since
# SINCE (uptime s). scx_layered gives Confined and Grouped layers their CPUs only in its userspace
# step, the first one an --interval after its main loop starts (1.1.4 main.rs `run`; its init does
# not size the layers before attaching). Before that a Confined layer owns no CPU and its threads
# run from the fallback queue on any CPU: rolesim's hot-0 ran on the shared vCPU for ~4 s of the
# window that followed each attach with --interval 5, and every profile arm's first cell (bg=0)
# measured that instead of the profile (docs/lab.md, "The first step").
first_step() {
    wait_s=$(awk -v since="$3" -v ms="$2" -v now="$(uptime_s)" \
        'BEGIN { w = since + ms / 1000 + 1 - now; printf "%.1f", (w > 0 ? w : 0) }')
    say "attach $1: first step (every ${2} ms) in $wait_s s"
    sleep "$wait_s"
    if [ -n "$SCX_PID" ]; then   # a thread it started after the attach was born at -20 too
        unnice "$SCX_PID"
        say "attach $1: scx_layered's threads at nice $(nices "$SCX_PID")"
    fi
}

# unnice PID: every thread of PID at nice 0 (scx_layered loaded at -20, attach above).
unnice() {
    for t in /proc/"$1"/task/*; do renice 0 -p "${t##*/}" > /dev/null 2>&1; done
}

# nices PID: the distinct nice values of PID's threads (stat's 19th field), e.g. "0".
nices() {
    for t in /proc/"$1"/task/*; do
        # shellcheck disable=SC2086  # the fields, one word each
        read -r st < "$t/stat" 2>/dev/null && { st=${st##*) }; set -- $st; echo "${17}"; }
    done | sort -u | tr '\n' ' ' | sed 's/ $//'
}

# refresh: have scx_layered match every target thread again when it next becomes runnable,
# one thread at a time. Its match map (layer_match_dbg, BPF_F_NO_PREALLOC) allocates an entry for
# each newly matched thread from a small per-CPU pool refilled by irq_work; a burst of matches
# with interrupts off loses entries silently, and the thread's refresh flag is cleared anyway, so
# it is never matched again. Measured in the lab (docs/lab.md "Membership: entries lost in a
# burst"): 1 of 20 spinning and 2 of 20 waking threads missing 3 s after the attach's own burst,
# 24 of 100 sleeping threads after one SIGSTOP/SIGCONT of their process (what this agent did
# before). Re-attaching a process to the cgroup it is in sets every thread's refresh flag
# (tp_btf/cgroup_attach_task) and moves nothing; a sleeping thread then re-matches at its next
# wake-up, and a runnable one (a spinner, or a thread renamed after its match that never blocks)
# when `nudge` re-queues it. Paced, so the pool refills between matches.
refresh() {
    reattach
    nudge_runnable
}

reattach() {
    for p in $(target_pids); do
        cg=$(sed -n 's/^0:://p' "/proc/$p/cgroup" 2>/dev/null)
        echo "$p" > "/sys/fs/cgroup${cg%/}/cgroup.procs" 2>/dev/null \
            || say "refresh: could not re-attach $p to its cgroup ${cg:-?}"
    done
}

nudge_runnable() {
    target_threads | while read -r p t _; do
        st=$(sed 's/.*) //' "/proc/$p/task/$t/stat" 2>/dev/null | cut -c1)
        [ "$st" = R ] && nudge "$t"
        sleep 0.02
    done
}

# nudge TID: re-queue a runnable thread (a nice change dequeues and enqueues it, which passes
# scx_layered's runnable callback), then put its nice value back.
nudge() {
    n=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f17)
    [ -n "$n" ] || return 0
    renice "$(( n == 19 ? 18 : n + 1 ))" -p "$1" > /dev/null 2>&1
    renice "$n" -p "$1" > /dev/null 2>&1
}

# run_counts: "tid count" of every target thread, count being how many times it has been on a
# CPU (schedstat's third field). Builtins only: the mid-window probe must not fork per thread.
run_counts() {
    target_threads | while read -r p t _; do
        read -r _ _ n < "/proc/$p/task/$t/schedstat" 2>/dev/null && echo "$t $n"
    done
}

# idle_since FILE [THREADS]: target threads that have not run since FILE (run_counts) was written,
# of THREADS ("pid tid comm" lines, as target_threads prints; listed afresh when not given). A
# thread the scheduler has not run since the attach's re-match has not been matched either: it is
# absent from the match map and placed nowhere yet, which is no fault (docs/lab.md "Membership").
idle_since() {
    [ -f "$1" ] || return 0
    if [ -n "${2:-}" ]; then cat "$2"; else target_threads; fi | while read -r p t _; do
        read -r _ _ n < "/proc/$p/task/$t/schedstat" 2>/dev/null || continue
        while read -r was count; do
            [ "$was" = "$t" ] && [ "$count" = "$n" ] && echo "$t"
        done < "$1"
    done
}

# placed_tids: target thread ids scx_layered has matched since their flag was set. From its own
# task state ($LAYER_OF, threadwise-layer-of: no re-match pending) where the plan carries the
# reader; else from the debug match map, which loses entries in a burst of matches (docs/lab.md
# "Membership").
placed_tids() {
    if [ -n "${LAYER_OF:-}" ]; then
        # shellcheck disable=SC2046  # one word per tid
        "$LAYER_OF" $(target_threads | while read -r _ t _; do printf '%s ' "$t"; done) 2>/dev/null \
            | while read -r t _ refresh; do [ "$refresh" = 0 ] && echo "$t"; done
    else
        bpftool -j map dump name layer_match_dbg 2>/dev/null \
            | grep -o '"formatted":{"key":[0-9]*' | sed 's/.*://'
    fi
}

# Target thread ids that have run since the attach's re-match and that scx_layered has not placed
# (idle ones are listed in $OUT/idle.tids).
unmatched() {
    # run counts first, placements second: a thread that ran before the count was read was
    # matched before (scx_layered matches as a thread becomes runnable), so no thread can read
    # "has run" and "not placed" only because it woke between the two reads
    idle_since "$OUT/arms/$1.ran" > "$OUT/idle.tids"
    placed_tids > "$OUT/matched.tids"
    target_threads | while read -r _ t _; do
        grep -qx "$t" "$OUT/matched.tids" || grep -qx "$t" "$OUT/idle.tids" || echo "$t"
    done
}

# settle ARM: refresh, then wait (up to SETTLE_TIMEOUT s, refreshing every 2 s) until every
# target thread that has run since is in the match map, so no cell starts with a thread the
# scheduler never placed. The cells still read membership in or after the window and judge it
# against the run counts written here (arms/ARM.ran); this only removes a start-up race.
settle() {
    # the run counts right after the flags are set: a thread that runs after this is matched as it
    # becomes runnable, so one that has run since and is still absent from the map is a fault
    reattach
    run_counts > "$OUT/arms/$1.ran"
    nudge_runnable
    [ -n "$(target_pids)" ] || return 0
    t0=$(date +%s)
    while :; do
        missing=$(unmatched "$1" | tr '\n' ' ')
        idle=$(wc -l < "$OUT/idle.tids" | tr -d ' ')
        [ -z "$missing" ] && { say "attach $1: every target thread that has run is matched ($idle not run since)"; return 0; }
        elapsed=$(( $(date +%s) - t0 ))
        if [ "$elapsed" -ge "$SETTLE_TIMEOUT" ]; then
            say "attach $1: threads still unmatched after $elapsed s: $missing($idle not run since)"; return 0
        fi
        sleep 1
        [ $(( elapsed % 2 )) -eq 1 ] && refresh
    done
}

detach() {
    if [ "$ATTACH_MODE" = runtime ]; then
        threadwise stop > "$OUT/arms/$1.stop.log" 2>&1 || say "detach $1: stop reported a problem"
    elif [ -n "$SCX_PID" ]; then
        kill -INT "$SCX_PID" 2>/dev/null; wait "$SCX_PID" 2>/dev/null; SCX_PID=""
    fi
    i=0
    while [ "$(cat /sys/kernel/sched_ext/state 2>/dev/null || echo disabled)" != disabled ] && [ "$i" -lt 100 ]; do
        sleep 0.2; i=$((i + 1))
    done
    ATTACHED=""
    say "detach $1: $(sched_state)"
}

# The POSIX `times` builtin of THIS shell (its second line: reaped children's user and sys time).
# Never in a subshell for the generator's CPU: a forked shell starts with zero child times (which
# is why the membership probe's subshell can report its own CPU, `times.probe`).

# probe DIR TIMES [DELAY]: after DELAY seconds, the target's threads, the layer scx_layered has
# each one in (layers.txt, from its task state by $LAYER_OF; membership.json, its debug match
# map, kept beside it and read where the reader is absent), their states (states.txt), those not
# run since the attach (idle.txt) and when it read them (probe.at), in a subshell
# that writes its own `times` (itself, then its children) to TIMES: the generator may exit while a
# mid-window probe runs and this shell reaps it then, so the change of this shell's child times
# around the probe is not the probe's CPU (measured: a probe starved for seconds under background
# took the generator's whole CPU with it).
probe() {
    ( # first in line: a mid-window probe races the load command's end, and under a profile it
      # waits in the catch-all behind the workload's layer (measured beside a 2-thread sysbench and
      # a spinner: at nice 0 over a second to list 3 threads, gone before their layers were read
      # in 4 runs of 6; at nice -20 still 0.45-0.75 s). SCHED_FIFO runs above sched_ext: the
      # same CPU, no wait.
      read -r me _ < /proc/self/stat   # this subshell ($$ is the agent's own pid)
      chrt -f -p 1 "$me" > /dev/null 2>&1 || renice -20 -p "$me" > /dev/null 2>&1
      # the delay in here, not in the caller: a FIFO sleeper wakes on time (measured: 0.2-0.4 s
      # late at nice 0 beside a 2-thread sysbench and a spinner)
      [ -n "${3:-}" ] && sleep "$3"
      read -r at0 _ < /proc/uptime
      target_threads > "$1/threads.txt"
      # each target process's title (NULs as spaces): where a profile selects by title, the hint
      # it earns is part of where its threads belong (ingest's membership, runtime/hints.py)
      [ -f "$OUT/arms/$ATTACHED.hints.json" ] && for p in $(target_pids); do
          printf '%s ' "$p"; tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null; echo
      done > "$1/titles.txt"
      # idle first (see unmatched): a thread counted as run was matched before the reads below
      idle_since "$OUT/arms/$ATTACHED.ran" "$1/threads.txt" > "$1/idle.txt"
      # each thread's state (R, S, D...): a re-match pending on a sleeping thread is taken when it
      # wakes, one on a running thread is not (ingest, docs/lab.md "Open")
      while read -r p t _; do
          read -r st < "/proc/$p/task/$t/stat" 2>/dev/null && { st=${st##*) }; echo "$t ${st%% *}"; }
      done < "$1/threads.txt" > "$1/states.txt"
      read -r at1 _ < /proc/uptime
      if [ -n "${LAYER_OF:-}" ]; then
          # shellcheck disable=SC2046  # one word per tid
          "$LAYER_OF" $(while read -r _ t _; do printf '%s ' "$t"; done < "$1/threads.txt") \
              > "$1/layers.txt" 2> "$1/layers.err"
      fi
      read -r at2 _ < /proc/uptime
      # when (uptime s) the probe began, had listed the threads, and had read their layers
      echo "$at0 $at1 $at2" > "$1/probe.at"
      bpftool -j map dump name layer_match_dbg > "$1/membership.json" 2> "$1/membership.err"
      times > "$2" )
}

# Where the CPU went: per-CPU busy time, the scheduler's own process, the service.
snapshot() {
    grep '^cpu' /proc/stat > "$1/procstat.$2"
    [ -n "$SCX_PID" ] && cat "/proc/$SCX_PID/stat" > "$1/scx.stat.$2" 2>/dev/null
    [ -n "$SVC_PID" ] && cat "/proc/$SVC_PID/stat" > "$1/service.stat.$2" 2>/dev/null
    return 0
}

alive() { if [ -n "$SVC_PID" ]; then kill -0 "$SVC_PID" 2>/dev/null && echo 1 || echo 0; else echo -; fi; }

# trace_start DIR: the libbpf tracer writing its record files into DIR/trace; wait until it is live.
trace_start() {
    mkdir -p "$1/trace"
    "$TRACER" --out "$1/trace" --ring-kb "$TRACE_RING_KB" > "$1/trace/control" 2> "$1/trace/stderr" < /dev/null &
    TPID=$!
    t0=$(date +%s)
    until grep -q '^live ' "$1/trace/control" 2>/dev/null; do
        if [ $(( $(date +%s) - t0 )) -ge "$TRACE_START_TIMEOUT" ] || ! kill -0 "$TPID" 2>/dev/null; then
            say "trace: the tracer did not go live: $(tail -c 200 "$1/trace/stderr" | tr '\n' ' ')"
            kill -INT "$TPID" 2>/dev/null; wait "$TPID" 2>/dev/null; TPID=""; return 0
        fi
        sleep 0.2
    done
    cat "/proc/$TPID/stat" > "$1/trace/tracer.stat.live" 2>/dev/null
    # the kernel's run time of every BPF program, for the tracer's cost (this cell is not measured)
    BPF_STATS=$(cat /proc/sys/kernel/bpf_stats_enabled 2>/dev/null || echo 0)
    echo 1 > /proc/sys/kernel/bpf_stats_enabled 2>/dev/null
    say "trace: live after $(( $(date +%s) - t0 )) s"
}

# trace_stop DIR: stop the tracer (it drains its rings and prints its kernel counts), then every
# thread's name: a thread that never left its CPU in the window has no record of its own.
trace_stop() {
    [ -n "$TPID" ] || return 0
    cat "/proc/$TPID/stat" > "$1/trace/tracer.stat.stop" 2>/dev/null
    bpftool -j prog show > "$1/trace/progs.json" 2>/dev/null
    echo "${BPF_STATS:-0}" > /proc/sys/kernel/bpf_stats_enabled 2>/dev/null
    kill -INT "$TPID" 2>/dev/null; wait "$TPID"; echo $? > "$1/trace/rc"; TPID=""
    grep -H '' /proc/[0-9]*/task/[0-9]*/comm > "$1/trace/threads" 2>/dev/null
    say "trace: stopped ($(cat "$1/trace/rc"))"
}

# trace_cell IDX ARM LEVEL REPEAT: an extra cell, never measured (refine/measure/blockers.py), run like any
# other with the tracer live over its window. In the initramfs guest init sends each finished
# cell over the serial console and marks it in $TW_SENT; this one is big, so wait until it has
# gone before the next cell, which must not share its CPUs with the transfer.
trace_cell() {
    TRACING=1; cell "$@"; TRACING=""
    [ -n "${TW_SENT:-}" ] || return 0
    t0=$(date +%s)
    while [ ! -e "$TW_SENT/$1" ] && [ $(( $(date +%s) - t0 )) -lt "$TRACE_SEND_TIMEOUT" ]; do sleep 0.5; done
    say "trace $1: $(du -sk "$OUT/cells/$1/trace" | cut -f1) KB; sent after $(( $(date +%s) - t0 )) s"
}

# spin_stats DIR WHEN: the spinner process's CPU (/proc/PID/stat) and, per thread, a line
# "tid state run_ns wait_ns" (/proc/PID/task/TID/stat and schedstat): a background that a profile
# starved was runnable (state R) for the whole window, one that never ran was not
# (refine/measure/validity.py). `read` builtins: no fork per thread.
spin_stats() {
    cat "/proc/$SPID/stat" > "$1/spin.stat.$2"
    for t in /proc/"$SPID"/task/[0-9]*; do
        read -r run wait _ < "$t/schedstat" 2>/dev/null || continue
        read -r line < "$t/stat" 2>/dev/null || continue
        state=${line##*) }
        echo "${t##*/} ${state%% *} $run $wait"
    done > "$1/spin.threads.$2"
}

# cell IDX ARM LEVEL REPEAT: background level, warm-up, one measurement window, raw results.
cell() {
    d="$OUT/cells/$1"; mkdir -p "$d"
    echo "$1 $2 $3 $4" > "$d/cell"
    say "cell $1: arm=$2 bg=$3 repeat=$4"
    sched_state > "$d/state.before"; alive > "$d/service.alive.before"
    SPID=""
    if [ "$3" -gt 0 ]; then "$SPIN" "$3" $SPIN_ARGS & SPID=$!; fi
    sleep "$WARMUP"
    [ -n "$TRACING" ] && trace_start "$d"
    [ -n "$SPID" ] && spin_stats "$d" before
    snapshot "$d" before
    times > "$d/times.before"
    start=$(uptime_s); lines0=$(wc -l < "$OUT/service.log" 2>/dev/null || echo 0)
    if [ "$LOAD_SOURCE" = command ]; then
        load_cmd > "$d/load.stdout" 2> "$d/load.stderr" < /dev/null &
        LPID=$!
    else
        sleep "$WINDOW" & LPID=$!
    fi
    ( sleep "$LOAD_TIMEOUT"; kill "$LPID" 2>/dev/null ) > /dev/null 2>&1 &
    WATCHDOG=$!
    # Membership only while a profile is attached, and out of the window where it can be: the probe
    # costs CPU (measured: in one baseline arm it made that arm ~10% slower at bg >= 1) and its
    # bpftool and /proc scan ran in the catch-all beside the workload (rolesim's workers waited
    # 100-1,400 us behind them at bg=0), a cost no baseline cell pays. After the window while the
    # target outlives it (a service: PROBE_AT=after); mid-window only when the load command is
    # itself the target, whose threads exist only while it runs.
    if [ "${PROBE_AT:-mid}" = mid ]; then
        if [ -n "$ATTACHED" ]; then probe "$d" "$d/times.probe" "$MEMBERSHIP_AT"; else sleep "$MEMBERSHIP_AT"; fi
    fi
    wait "$LPID"; echo $? > "$d/load.rc"
    times > "$d/times.after"
    kill "$WATCHDOG" 2>/dev/null; wait "$WATCHDOG" 2>/dev/null
    end=$(uptime_s); lines1=$(wc -l < "$OUT/service.log" 2>/dev/null || echo 0)
    [ -n "$SPID" ] && spin_stats "$d" after
    snapshot "$d" after
    [ -n "$TRACING" ] && trace_stop "$d"
    # the window (and its trace) is over, the background still runs: the threads and their layers
    [ "${PROBE_AT:-mid}" = after ] && [ -n "$ATTACHED" ] && probe "$d" /dev/null
    [ -n "$SPID" ] && { kill "$SPID"; wait "$SPID" 2>/dev/null; }
    echo "$start $end" > "$d/wall"; echo "$lines0 $lines1" > "$d/service.lines"
    # the window's own report lines go with the cell, so the host can read its metrics as soon as
    # the cell comes back (refine's early stop) and not only once service.log does, at the end.
    # Guarded: sed prints line N alone for an address range N,M with M < N.
    if [ "$LOAD_SOURCE" != command ]; then
        if [ "$lines1" -gt "$lines0" ]; then
            sed -n "$((lines0 + 1)),${lines1}p" "$OUT/service.log" > "$d/service.window"
        else
            : > "$d/service.window"
        fi
    fi
    sched_state > "$d/state.after"; alive > "$d/service.alive.after"
    getconf CLK_TCK > "$d/clk_tck" 2>/dev/null || echo 100 > "$d/clk_tck"
    echo ok > "$d/done"
    say "cell $1: done ($(cat "$d/load.rc"))"
}

on_signal() {
    say "interrupted"
    [ -n "$TPID" ] && kill -INT "$TPID" 2>/dev/null
    [ -n "$SCX_PID" ] && kill -INT "$SCX_PID" 2>/dev/null
    [ "$ATTACH_MODE" = runtime ] && threadwise stop > /dev/null 2>&1
    exit 130   # the EXIT trap stops the service
}
trap on_signal INT TERM
# However the agent ends (a failed step's `exit`, a signal, the plan's end), the service it started
# does not outlive it: on a host ladder nothing else would stop it (a failed prepare left mariadbd
# running). After the plan's own service_stop, SVC_PID is empty and this does nothing.
trap 'service_stop' EXIT

say "start $(uname -r) cpus=$(nproc 2>/dev/null || echo ?) $(sched_state)"
. "$OUT/plan.sh"
say "finished"
echo ok > "$OUT/finished"
