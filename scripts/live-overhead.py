#!/usr/bin/env python3
"""Does the live view change what bench measures? bench's TTFT error at concurrency 64 (the
anchors' measure: client TTFT minus the scripted server's own, matched by nonce in its log) with
stderr redirected (no view) and with stderr on a terminal (tmux: the view redraws), interleaved,
REPEATS times each, against release builds. Prints each run and the ratio of the medians of the
view-on and view-off p50 and p99, with the spread of the repeats as its noise (docs/live.md).

    cargo build --release --bins && python3 scripts/live-overhead.py [--repeats 3] [--requests 512]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import anchors  # noqa: E402  (the server, its log and the error measure, as the anchors table uses them)


def run_bench(bench, url, out, requests, words, output_tokens, view):
    command = [
        bench, "sweep", "--server", url, "--preset", "openai", "--contexts", str(words + anchors.TEMPLATE),
        "--modes", "streaming", "--cache-states", "cold", "--batch-sizes", "64",
        "--runs", str(max(requests // 64, 1)), "--output-tokens", str(output_tokens),
        "--thermal", "off", "--out", str(out),
    ]
    if view:
        # A terminal of its own: stderr is a tty, so the view draws (8 redraws a second at most).
        socket = f"live-overhead-{os.getpid()}"
        done = out.parent / f"{out.name}.exit"
        script = " ".join(f"'{c}'" for c in command) + f"; echo $? > {done}"
        subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "-x", "160", "-y", "50",
                        "sh", "-c", script], check=True)
        while not done.exists() or not done.read_text().endswith("\n"):
            time.sleep(0.1)
        subprocess.run(["tmux", "-L", socket, "kill-server"], check=False)
    else:
        with open(out.parent / f"{out.name}.log", "wb") as log:
            subprocess.run(command, stdout=log, stderr=log, check=False)
    ttfts = {}
    for records in out.glob("*/measurements.jsonl"):
        for line in records.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("record_type") == "measurement" and rec.get("ttft_ms") is not None and not rec.get("error"):
                ttfts[rec["nonce"]] = float(rec["ttft_ms"])
    return ttfts


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--requests", type=int, default=512)
    p.add_argument("--words", type=int, default=505)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--first-token-ms", type=int, default=20)
    p.add_argument("--token-ms", type=float, default=1.0)
    p.add_argument("--server-bin", default=anchors.default_bin("bench-scripted-server"))
    p.add_argument("--bench-bin", default=anchors.default_bin("bench"))
    args = p.parse_args()
    if not shutil.which("tmux"):
        print("live-overhead: tmux is needed (the view-on runs draw in a tmux pane)", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="live-overhead-"))
    rows = {False: [], True: []}
    print(f"bench sweep, batch 64, {args.requests} cold requests per run, {os.cpu_count()} cores; TTFT error ms")
    for i in range(args.repeats):
        for view in (False, True):
            out = root / f"{'on' if view else 'off'}-{i}"
            log = root / f"server-{out.name}.jsonl"
            with anchors.Server(args.server_bin, log, args.first_token_ms, args.token_ms) as server:
                ttfts = run_bench(args.bench_bin, server.url, out, args.requests, args.words, args.output_tokens, view)
                served = anchors.read_log(log, len(ttfts))
            errs, _ = anchors.errors(ttfts, served, 64)
            p50, p99 = anchors.percentile(errs, 0.5), anchors.percentile(errs, 0.99)
            rows[view].append((p50, p99))
            print(f"view {'on ' if view else 'off'} run {i + 1}: n {len(errs)}  p50 {p50}  p99 {p99}", flush=True)
    for k, name in ((0, "p50"), (1, "p99")):
        off = [r[k] for r in rows[False]]
        on = [r[k] for r in rows[True]]
        spread = lambda v: (max(v) - min(v)) / statistics.median(v)  # noqa: E731
        print(f"{name}: view on / off = {statistics.median(on) / statistics.median(off):.3f} "
              f"(median of {len(on)} vs {len(off)}; spread of the repeats: on {spread(on):.0%}, off {spread(off):.0%})")
    print(f"runs in {root}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
