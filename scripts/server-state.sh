# Sourced by scripts/llama-server.sh and scripts/agent-memory.sh: a server started in the background
# and known by its state directory (DIR/pid, DIR/url). The sourcing script sets SERVER_PROCESS (a
# word of the server's command line, so a reused pid is never taken for the server) and
# STOP_GRACE_S (how long SIGTERM gets before SIGKILL), and defines log().

pid_alive() { # pid -> 0 iff that pid is a running $SERVER_PROCESS
    local pid=$1
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
    # guard against pid reuse: must still be the server
    [[ ! -r /proc/$pid/cmdline ]] || tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$SERVER_PROCESS"
}

state_pid() { cat "$1/pid" 2>/dev/null || true; }

do_stop() { # DIR: stop the server of that state dir (no error if none)
    local dir=$1 pid i
    pid=$(state_pid "$dir")
    if pid_alive "$pid"; then
        log "stopping $SERVER_PROCESS pid $pid ($dir)"
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < STOP_GRACE_S * 10; i++)); do
            pid_alive "$pid" || break
            sleep 0.1
        done
        if pid_alive "$pid"; then
            log "pid $pid still alive after $STOP_GRACE_S s, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do pid_alive "$pid" || break; sleep 0.1; done
        fi
    fi
    rm -f "$dir/pid" "$dir/url"
}

do_url() { # DIR: print the URL of its running server, or exit 1
    local dir=$1 pid
    pid=$(state_pid "$dir")
    if pid_alive "$pid" && [[ -s $dir/url ]]; then
        cat "$dir/url"
    else
        log "no running server for state dir $dir"
        exit 1
    fi
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_ready() { # DIR PID HEALTH_URL TAKEN_RE CAN_RETRY [CHECK ARGS...]
    # 0 once HEALTH_URL answers 200 (and CHECK ARGS... passes); 2 when the server exited because
    # its port was taken (its log matches TAKEN_RE) and CAN_RETRY is 1, so another port may be
    # tried; otherwise says why (the log's last lines), stops the server and exits 1.
    local dir=$1 pid=$2 health=$3 taken=$4 can_retry=$5 start=$SECONDS code
    shift 5
    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            if [[ $can_retry == 1 ]] && grep -qiE "$taken" "$dir/server.log"; then
                return 2
            fi
            log "$SERVER_PROCESS exited during startup; last lines of $dir/server.log:"
            tail -n 30 "$dir/server.log" >&2
            rm -f "$dir/pid"
            exit 1
        fi
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$health" || true)
        if [[ $code == 200 ]] && { (($# == 0)) || "$@"; }; then
            return 0
        fi
        if ((SECONDS - start >= 120)); then
            log "$SERVER_PROCESS not ready after 120 s; last lines of $dir/server.log:"
            tail -n 30 "$dir/server.log" >&2
            do_stop "$dir"
            exit 1
        fi
        sleep 0.2
    done
}
