#!/usr/bin/env python3
"""Parity of bench with a raw client: bench's own request bodies replayed by a minimal client.

On one llama-server, per context and cache state, in rounds: bench measures one cell (writing its
request body with --request-bodies), then this script sends the SAME bytes from Python's http.client
and stamps the first content byte; bench, raw, bench, raw, ... So both clients see the same server,
the same prompt text and the same moment of the machine's life, and the difference between their
TTFTs is the clients'. Each replayed body is checked against bench's (length and CRC-32) before it
is sent, and its SHA-256 is reported.

The raw client knows llama-server's API by itself (nothing of bench's preset is used):
- cold: erase the slot the body names (id_slot), then the timed request;
- warm: erase, send the body once unstreamed (prime), save the slot to a file, erase, drop the
  file from the OS page cache (with --slot-dir, as bench does), then time restore + request: the
  restore is inside TTFT, as in bench's warm.
Both start the clock before their connection is opened (bench opens one per streamed request to
llama-server, which closes it after every stream).

Also timed: the server's tokenization of each context's prompt (POST /tokenize of the body's user
text, median of --tokenize-reps), to say what share of a cold TTFT it is.

    parity.py --bench BENCH --server URL --contexts 1k,4k --states cold,warm --rounds 3 --out DIR
              [--slot-dir DIR] [--output-tokens 64] [--tokenize-reps 5]

Writes DIR/pairs.jsonl (one line per bench/raw pair), DIR/parity.json (per context and state:
medians of both, the ratio) and DIR/parity.md (the table), and prints the table. Exit 0 when
every pair was measured by both; 1 when some pair failed (the files say which); 2 on bad input;
3 when the server is unreachable.
"""

import argparse
import hashlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.parse
import zlib

GOAL_PCT = 2.0


def die(code, msg):
    print(f"parity.py: error: {msg}", file=sys.stderr)
    sys.exit(code)


class Server:
    def __init__(self, url, timeout_s):
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            die(2, f"--server {url}: an http://HOST:PORT address is needed")
        self.host, self.port = u.hostname, u.port or 80
        self.timeout_s = timeout_s

    def connect(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)

    def call(self, path, body=None):
        """An untimed JSON call; returns (status, parsed body or None)."""
        conn = self.connect()
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request("POST" if data is not None else "GET", path, body=data,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
            try:
                return resp.status, json.loads(raw)
            except ValueError:
                return resp.status, None
        finally:
            conn.close()

    def slot_action(self, slot, action, filename=None):
        body = {"filename": filename} if filename else {}
        status, reply = self.call(f"/slots/{slot}?action={action}", body)
        if status != 200:
            raise RuntimeError(f"slot {slot} {action}: HTTP {status}: {reply}")
        return reply

    def stream(self, path, body, t0=None):
        """Sends body (bytes) and reads the SSE reply. TTFT is stamped when the line carrying the
        first non-empty content or reasoning delta has been read, before it is parsed further."""
        t0 = time.perf_counter() if t0 is None else t0
        conn = self.connect()
        try:
            conn.request("POST", path, body=body, headers={
                "Content-Type": "application/json", "Accept": "text/event-stream", "Connection": "close"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
            ttft, timings, content = None, None, []
            while True:
                line = resp.fp.readline()
                at = time.perf_counter()
                if not line:
                    break
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                event = json.loads(payload)
                for choice in event.get("choices") or []:
                    delta = choice.get("delta") or {}
                    text = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
                    if text:
                        content.append(text)
                        if ttft is None:
                            ttft = (at - t0) * 1000.0
                if event.get("timings"):
                    timings = event["timings"]
            return ttft, timings, "".join(content)
        finally:
            conn.close()


def drop_from_page_cache(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def replay(server, line, state, slot_dir, n):
    """One raw measurement of bench's body `line` in `state`."""
    body = line["body"].encode("utf-8")
    if len(body) != line["body_bytes"] or f"{zlib.crc32(body):08x}" != line["body_crc32"]:
        die(5, f"the body of nonce {line['nonce']} does not match its length/CRC-32 in request-bodies.jsonl")
    parsed = json.loads(body)
    slot = parsed.get("id_slot", 0)
    out = {"replayed_bytes": len(body), "replayed_crc32": f"{zlib.crc32(body):08x}",
           "replayed_sha256": hashlib.sha256(body).hexdigest(), "raw_restore_ms": None}
    server.slot_action(slot, "erase")
    if state == "cold":
        ttft, timings, text = server.stream(line["path"], body)
    elif state == "warm":
        prime = dict(parsed, stream=False)
        prime.pop("stream_options", None)
        status, reply = server.call(line["path"], prime)
        if status != 200:
            raise RuntimeError(f"priming: HTTP {status}: {reply}")
        filename = f"parity-raw-{os.getpid()}-{n}.bin"
        server.slot_action(slot, "save", filename)
        server.slot_action(slot, "erase")
        if slot_dir:
            drop_from_page_cache(os.path.join(slot_dir, filename))
        t0 = time.perf_counter()
        server.slot_action(slot, "restore", filename)
        out["raw_restore_ms"] = (time.perf_counter() - t0) * 1000.0
        ttft, timings, text = server.stream(line["path"], body, t0=t0)
        if slot_dir:
            try:
                os.remove(os.path.join(slot_dir, filename))
            except OSError:
                pass
    else:
        die(2, f"--states: {state}: only cold and warm are replayed")
    server.slot_action(slot, "erase")
    timings = timings or {}
    out.update(raw_ttft_ms=ttft, raw_prompt_ms=timings.get("prompt_ms"),
               raw_cache_n=timings.get("cache_n"), raw_prompt_n=timings.get("prompt_n"),
               raw_output_chars=len(text))
    return out


def run_bench(args, context, state, run_id):
    cmd = [args.bench, "sweep", "--server", args.server, "--preset", "llama.cpp", "--contexts", context,
           "--cache-states", state, "--runs", "1", "--output-tokens", str(args.output_tokens),
           "--thermal", "off", "--request-bodies", "--out", os.path.join(args.out, "bench"),
           "--run-id", run_id, "--quiet"]
    if args.slot_dir:
        cmd += ["--slot-dir", args.slot_dir]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode == 3:
        die(3, f"bench: the server is unreachable: {done.stderr.strip()[-500:]}")
    if done.returncode not in (0, 1):
        die(done.returncode if done.returncode in (2, 4) else 5,
            f"bench {' '.join(cmd[1:])} exited {done.returncode}: {done.stderr.strip()[-800:]}")
    run_dir = os.path.join(args.out, "bench", run_id)
    records = [json.loads(l) for l in open(os.path.join(run_dir, "measurements.jsonl")) if l.strip()]
    bodies = [json.loads(l) for l in open(os.path.join(run_dir, "request-bodies.jsonl")) if l.strip()]
    record = next(r for r in records if r.get("cache_state") == state and "ttft_ms" in r)
    line = next((b for b in bodies if b["nonce"] == record["nonce"] and b["cache_state"] == state), None)
    if line is None or line.get("body") is None:
        die(5, f"{run_dir}: no body for nonce {record['nonce']} ({(line or {}).get('withheld')})")
    if args.slot_dir:  # bench's saved sessions are not needed again
        for name in os.listdir(args.slot_dir):
            if name.startswith("tb-") and name.endswith(".bin"):
                os.remove(os.path.join(args.slot_dir, name))
    return run_dir, record, line


def tokenize_ms(server, text, reps):
    times, n = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        status, reply = server.call("/tokenize", {"content": text})
        times.append((time.perf_counter() - t0) * 1000.0)
        if status != 200 or not isinstance(reply, dict):
            return None, None
        n = len(reply.get("tokens") or [])
    return statistics.median(times), n


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(pairs, tokenized):
    rows = []
    keys = sorted({(p["context_tokens"], p["state"]) for p in pairs}, key=lambda k: (k[0], k[1]))
    for ctx, state in keys:
        ps = [p for p in pairs if p["context_tokens"] == ctx and p["state"] == state]
        b, r = median([p["bench_ttft_ms"] for p in ps]), median([p["raw_ttft_ms"] for p in ps])
        tok = tokenized.get(ctx, {})
        row = {
            "context_tokens": ctx, "state": state, "pairs": len(ps),
            "input_tokens": median([p["bench_input_tokens"] for p in ps]),
            "bench_ttft_ms": b, "raw_ttft_ms": r,
            "bench_over_raw": (b / r) if b and r else None,
            "bench_minus_prompt_ms": median([p["bench_ttft_ms"] - p["bench_prompt_ms"] for p in ps
                                             if p["bench_ttft_ms"] is not None and p["bench_prompt_ms"] is not None]),
            "raw_minus_prompt_ms": median([p["raw_ttft_ms"] - p["raw_prompt_ms"] for p in ps
                                           if p["raw_ttft_ms"] is not None and p["raw_prompt_ms"] is not None]),
            "bench_prompt_ms": median([p["bench_prompt_ms"] for p in ps]),
            "raw_prompt_ms": median([p["raw_prompt_ms"] for p in ps]),
            "bodies_matched": sum(p["replayed_crc32"] == p["bench_body_crc32"] for p in ps),
            "tokenize_ms": tok.get("tokenize_ms"), "tokenized_tokens": tok.get("tokens"),
        }
        row["tokenize_share_of_raw_ttft"] = (row["tokenize_ms"] / r) if row["tokenize_ms"] and r else None
        row["within_goal"] = (abs(row["bench_over_raw"] - 1) * 100 <= GOAL_PCT) if row["bench_over_raw"] else None
        rows.append(row)
    return rows


def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def table(rows):
    out = ["| context | state | pairs | bench TTFT ms | raw TTFT ms | bench/raw | bench - prompt_ms | "
           "raw - prompt_ms | /tokenize ms | tokenize share of raw TTFT | bodies matched |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = fmt(r["bench_over_raw"], ".3f")
        if r["within_goal"] is False:
            # Which way matters: above means bench adds time the raw client does not; below means
            # the raw client's own overhead or the server's spread between rounds.
            off = (r["bench_over_raw"] - 1) * 100
            ratio += f" (bench {abs(off):.1f}% {'above' if off > 0 else 'below'})"
        share = "-" if r["tokenize_share_of_raw_ttft"] is None else f"{r['tokenize_share_of_raw_ttft'] * 100:.1f}%"
        out.append(f"| {r['context_tokens']} | {r['state']} | {r['pairs']} | {fmt(r['bench_ttft_ms'])} | "
                   f"{fmt(r['raw_ttft_ms'])} | {ratio} | {fmt(r['bench_minus_prompt_ms'])} | "
                   f"{fmt(r['raw_minus_prompt_ms'])} | {fmt(r['tokenize_ms'], '.2f')} | {share} | "
                   f"{r['bodies_matched']}/{r['pairs']} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="the bench binary")
    ap.add_argument("--server", required=True, help="llama-server base URL (http://HOST:PORT)")
    ap.add_argument("--contexts", default="1k,4k,16k,32k", help="comma-separated, as bench --contexts")
    ap.add_argument("--states", default="cold,warm", help="cold, warm or both")
    ap.add_argument("--rounds", type=int, default=3, help="bench/raw pairs per context and state")
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--slot-dir", help="the server's --slot-save-path, when on this host")
    ap.add_argument("--tokenize-reps", type=int, default=5)
    ap.add_argument("--timeout-s", type=float, default=600)
    ap.add_argument("--out", required=True, help="directory for bench's runs and the parity files")
    args = ap.parse_args()
    if not os.access(args.bench, os.X_OK):
        die(2, f"--bench {args.bench}: not an executable")
    if args.rounds < 1:
        die(2, "--rounds: at least 1")
    states = [s.strip() for s in args.states.split(",") if s.strip()]
    if not states or any(s not in ("cold", "warm") for s in states):
        die(2, f"--states {args.states}: cold and/or warm")
    contexts = [c.strip() for c in args.contexts.split(",") if c.strip()]
    os.makedirs(args.out, exist_ok=True)
    server = Server(args.server, args.timeout_s)
    try:
        server.call("/health")
    except OSError as e:
        die(3, f"--server {args.server}: {e}")
    # The raw client's own warm-up (bench does one per sweep): a first request is slower.
    server.stream("/v1/chat/completions", json.dumps({
        "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4, "stream": True,
        "id_slot": 0}).encode())
    server.slot_action(0, "erase")

    pairs, tokenized, failed, n = [], {}, 0, 0
    pairs_file = open(os.path.join(args.out, "pairs.jsonl"), "w")
    for rnd in range(1, args.rounds + 1):
        for context in contexts:
            for state in states:
                n += 1
                run_id = f"{context}-{state}-r{rnd}"
                run_dir, record, line = run_bench(args, context, state, run_id)
                ctx_tokens = record["context_tokens"]
                if ctx_tokens not in tokenized:
                    text = json.loads(line["body"])["messages"][-1]["content"]
                    ms, count = tokenize_ms(server, text, args.tokenize_reps)
                    tokenized[ctx_tokens] = {"tokenize_ms": ms, "tokens": count, "chars": len(text)}
                try:
                    raw = replay(server, line, state, args.slot_dir, n)
                    error = None
                except (RuntimeError, OSError, ValueError) as e:
                    raw, error = {}, str(e)
                timings = record.get("server_timings") or {}
                pair = {
                    "context_tokens": ctx_tokens, "state": state, "round": rnd, "bench_run": run_dir,
                    "nonce": line["nonce"], "bench_body_bytes": line["body_bytes"],
                    "bench_body_crc32": line["body_crc32"], "bench_ttft_ms": record.get("ttft_ms"),
                    "bench_prompt_ms": timings.get("prompt_ms"), "bench_reload_ms": record.get("reload_ms"),
                    "bench_input_tokens": record.get("input_tokens"),
                    "bench_quality_ok": record.get("quality_ok"),
                    "bench_cache_state_confirmed": record.get("cache_state_confirmed"),
                    "replayed_bytes": None, "replayed_crc32": None, "replayed_sha256": None,
                    "raw_ttft_ms": None, "raw_prompt_ms": None, "raw_restore_ms": None,
                    "raw_cache_n": None, "raw_prompt_n": None, "error": error,
                }
                pair.update(raw)
                if error or pair["raw_ttft_ms"] is None or pair["bench_ttft_ms"] is None:
                    failed += 1
                pairs.append(pair)
                pairs_file.write(json.dumps(pair) + "\n")
                pairs_file.flush()
                print(f"parity: {ctx_tokens} {state} round {rnd}: bench {fmt(pair['bench_ttft_ms'])} ms, "
                      f"raw {fmt(pair['raw_ttft_ms'])} ms{' (' + error + ')' if error else ''}", file=sys.stderr)
    pairs_file.close()
    rows = summarize(pairs, tokenized)
    summary = {"server": args.server, "rounds": args.rounds, "output_tokens": args.output_tokens,
               "goal_pct": GOAL_PCT, "tokenized": {str(k): v for k, v in tokenized.items()}, "rows": rows}
    with open(os.path.join(args.out, "parity.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    md = table(rows)
    with open(os.path.join(args.out, "parity.md"), "w") as f:
        f.write(md)
    sys.stdout.write(md)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
