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
