#!/usr/bin/env python3
"""The anchors: AIPerf and GuideLLM, two widely used Python benchmark clients, measured beside
bench against bench-scripted-server, whose own log says when it read each request and when it
wrote each request's first token (docs/anchors.md).

    python3 scripts/anchors.py install            # the pinned clients in virtual environments, a local tokenizer
    python3 scripts/anchors.py available          # exit 0 when installed, else 1 saying what is missing
    python3 scripts/anchors.py client NAME ...    # one client's run against a running server
    python3 scripts/anchors.py table ...          # every client at concurrency 1 and 64: TTFT error, CPU

Runs on the system python3 (standard library only); the clients run from their own virtual
environments under ${TTFT_BENCH_CACHE:-~/.cache/ttft-bench}/anchors. Nothing is fetched at run
time: the tokenizer the clients need is built here, and HF_HUB_OFFLINE=1 keeps them off the hub.

TTFT error is what benches/external.rs calls it: the client's TTFT minus the server's (its first
content chunk handed to the connection minus its read of the whole body), per request, matched by
the prompt's nonce (`[ref NNNNNNNNNNNN]`, which the server logs). CPU is the client process's
rusage (user + system, its waited-for children included: AIPerf's workers, GuideLLM's), from
start to exit, per 100 requests.
"""

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("TTFT_BENCH_CACHE", Path.home() / ".cache" / "ttft-bench")) / "anchors"
LOCKS = ROOT / "scripts" / "anchors"
CLIENTS = ("aiperf", "guidellm")
# The tokenizer both clients load, by a repo id found only in a local Hugging Face cache: with
# HF_HUB_OFFLINE=1, AIPerf 0.13 resolves every tokenizer name through the hub cache (a directory
# path fails there), and GuideLLM's transformers reads the same cache.
TOKENIZER_ID = "ttft-bench/anchors-tokenizer"
HF_HOME = CACHE / "hf-home"
TOKENIZER_REVISION = "0" * 40
TOKENIZER = HF_HOME / "hub" / "models--ttft-bench--anchors-tokenizer" / "snapshots" / TOKENIZER_REVISION
# The scripted server's chat template costs this many tokens per message (crates/scripted/src/lib.rs):
# a prompt of CONTEXT - TEMPLATE words is CONTEXT tokens to the server, as bench sizes its own.
TEMPLATE = 7
MODEL = "scripted"

# Words of the prompts and of the local tokenizer's vocabulary.
WORDS = (
    "the cache keeps keys and values of earlier tokens so a server can answer faster when the same "
    "prompt returns model memory bandwidth decode prefill batch request stream token time first "
    "second client measures what it adds to each reply and how much of a core it spends doing so"
).split()


def venv(name):
    return CACHE / name


def python_of(name):
    return venv(name) / "bin" / "python"


def lock_digest(name):
    return hashlib.sha256((LOCKS / f"{name}.txt").read_bytes()).hexdigest()


def missing(names=CLIENTS):
    """What `install` has not put in place for `names` (empty when all is there and current)."""
    out = []
    for name in names:
        stamp = venv(name) / ".anchors-lock"
        if not stamp.exists() or stamp.read_text().strip() != lock_digest(name):
            out.append(f"{venv(name)} (the {name} environment of scripts/anchors/{name}.txt)")
    if not (TOKENIZER / "tokenizer.json").exists():
        out.append(f"{TOKENIZER}/tokenizer.json")
    return out


def cmd_available(args):
    gone = missing(args.clients or CLIENTS)
    if gone:
        print("anchors not installed (bash scripts/anchors.sh install): missing " + ", ".join(gone), file=sys.stderr)
        return 1
    return 0


def cmd_install(args):
    """Each client named (default: all) in a virtual environment of its own (their pins differ),
    every package at the version its lock file names (no resolution at install time), then the
    tokenizer."""
    names = args.clients or CLIENTS
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in names:
        stamp = venv(name) / ".anchors-lock"
        if stamp.exists() and stamp.read_text().strip() == lock_digest(name):
            print(f"anchors: {name} already installed in {venv(name)}", file=sys.stderr)
            continue
        started = time.monotonic()
        if venv(name).exists():
            shutil.rmtree(venv(name))
        subprocess.run([sys.executable, "-m", "venv", str(venv(name))], check=True)
        pip = [str(python_of(name)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
        subprocess.run([*pip, "--no-deps", "-r", str(LOCKS / f"{name}.txt")], check=True)
        stamp.write_text(lock_digest(name) + "\n")
        print(f"anchors: {name} installed in {venv(name)} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    build_tokenizer(names[0])
    return 0


def build_tokenizer(python_env):
    """A word-level tokenizer of the prompts' words, saved as a Hugging Face tokenizer
    (tokenizer.json, tokenizer_config.json, config.json) in the layout of the hub's cache, its
    `main` revision pointing at it, so that both clients load TOKENIZER_ID offline."""
    TOKENIZER.mkdir(parents=True, exist_ok=True)
    refs = TOKENIZER.parent.parent / "refs"
    refs.mkdir(exist_ok=True)
    (refs / "main").write_text(TOKENIZER_REVISION)
    code = r"""
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
out, words = sys.argv[1], sys.argv[2:]
vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
for w in sorted(set(words) | {"ref", "[", "]", "notes", ":", "?"} | {f"w{i}" for i in range(4096)}):
    vocab.setdefault(w, len(vocab))
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.decoder = decoders.WordPiece(prefix="##")
tok.save(f"{out}/tokenizer.json")
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "bos_token": "<s>",
           "eos_token": "</s>", "model_max_length": 1048576,
           "chat_template": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"},
          open(f"{out}/tokenizer_config.json", "w"))
json.dump({"model_type": "llama"}, open(f"{out}/config.json", "w"))
"""
    # Any client's environment has the `tokenizers` package (both clients load tokenizers with it).
    subprocess.run([str(python_of(python_env)), "-c", code, str(TOKENIZER), *WORDS], check=True)
    print(f"anchors: tokenizer in {TOKENIZER}", file=sys.stderr)


# --- prompts -------------------------------------------------------------------------------------


def prompt(nonce, words):
    """A prompt the scripted server logs by its nonce, `words` whitespace tokens long."""
    head = [f"[ref {nonce}]", "Notes:"]
    body = [WORDS[(i * 7 + int(nonce)) % len(WORDS)] for i in range(max(words - len(head) - 1, 0))]
    return " ".join([*head, *body, "why?"])


def nonces(prefix, n):
    """`n` distinct 12-digit nonces; `prefix` keeps those of different runs apart."""
    return [f"{prefix:04d}{i:08d}" for i in range(n)]


# --- one client's run ----------------------------------------------------------------------------


def offline_env():
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["HF_HOME"] = str(HF_HOME)
    return env


def run_measured(command, cwd, log, timeout_s):
    """Runs `command` to its end, its output to `log`; returns (exit code, CPU seconds, wall
    seconds). CPU is wait4's rusage of the child: its own and every descendant it waited for."""
    started = time.monotonic()
    with open(log, "wb") as out:
        child = subprocess.Popen(command, cwd=cwd, env=offline_env(), stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = started + timeout_s
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.killpg(child.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(child.pid, 0)
                status = 137 << 8
                break
            time.sleep(0.02)
        child.returncode = os.waitstatus_to_exitcode(status)
    # Anything of its process group still running (a worker it did not wait for) goes now.
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return child.returncode, usage.ru_utime + usage.ru_stime, time.monotonic() - started


def write_prompts(path, ns, words, output_tokens, shape):
    with open(path, "w") as f:
        for n in ns:
            text = prompt(n, words)
            line = {"text": text, "output_length": output_tokens} if shape == "aiperf" else {
                "prompt": text, "output_tokens_count": output_tokens}
            f.write(json.dumps(line) + "\n")


def run_aiperf(url, out, requests, concurrency, words, output_tokens, prefix, timeout_s):
    ns = nonces(prefix, requests)
    write_prompts(out / "prompts.jsonl", ns, words, output_tokens, "aiperf")
    command = [
        str(venv("aiperf") / "bin" / "aiperf"), "profile", "--model", MODEL, "--url", url,
        "--endpoint-type", "chat", "--streaming", "--tokenizer", TOKENIZER_ID,
        "--input-file", str(out / "prompts.jsonl"), "--custom-dataset-type", "single_turn",
        "--dataset-sampling-strategy", "sequential", "--request-count", str(requests),
        "--concurrency", str(concurrency), "--artifact-dir", str(out / "aiperf"), "--ui-type", "none",
        "--export-level", "raw",
    ]
    code, cpu, wall = run_measured(command, out, out / "aiperf.log", timeout_s)
    return code, cpu, wall, aiperf_ttfts(out / "aiperf")


def aiperf_ttfts(artifacts):
    """nonce -> AIPerf's own time_to_first_token (ms): its per-request records joined to the raw
    export's request payloads (which carry the prompt) by x_request_id. The raw export is
    profile_export_raw.jsonl once AIPerf finished, its parts in raw_records/ when it did not."""
    payload_nonce = {}
    for raw in [artifacts / "profile_export_raw.jsonl", *sorted((artifacts / "raw_records").glob("*.jsonl"))]:
        if not raw.exists():
            continue
        for line in raw.read_text().splitlines():
            rec = json.loads(line)
            nonce = nonce_in(json.dumps(rec.get("payload")))
            rid = (rec.get("metadata") or {}).get("x_request_id")
            if nonce and rid:
                payload_nonce[rid] = nonce
    out = {}
    records = artifacts / "profile_export.jsonl"
    for line in records.read_text().splitlines() if records.exists() else []:
        rec = json.loads(line)
        ttft = ((rec.get("metrics") or {}).get("time_to_first_token") or {}).get("value")
        nonce = payload_nonce.get((rec.get("metadata") or {}).get("x_request_id"))
        if ttft is not None and nonce and not rec.get("error"):
            out[nonce] = float(ttft)
    return out


def run_guidellm(url, out, requests, concurrency, words, output_tokens, prefix, timeout_s):
    ns = nonces(prefix, requests)
    write_prompts(out / "prompts.jsonl", ns, words, output_tokens, "guidellm")
    scenario = {
        "metadata": {"name": "ttft-bench-anchors"},
        "spec": {
            "backend": {"kind": "openai_http", "target": url, "model": MODEL,
                        "request_format": "/v1/chat/completions"},
            "profile": {"kind": "concurrent", "streams": concurrency},
            "tokenizer": {"kind": "huggingface_auto", "model": TOKENIZER_ID},
            "data": [{"kind": "json_file", "path": str(out / "prompts.jsonl")}],
            "constraints": [{"kind": "max_requests", "count": requests}],
            "outputs": [{"kind": "json", "path": str(out / "benchmarks.json")}],
        },
    }
    (out / "scenario.json").write_text(json.dumps(scenario, indent=1))
    command = [str(venv("guidellm") / "bin" / "guidellm"), "run", "--scenario", "scenario.json",
               "--disable-progress"]
    code, cpu, wall = run_measured(command, out, out / "guidellm.log", timeout_s)
    return code, cpu, wall, guidellm_ttfts(out / "benchmarks.json")


def guidellm_ttfts(report):
    """nonce -> GuideLLM's own time_to_first_token_ms of each successful request (the prompt is
    in the request_args it keeps)."""
    out = {}
    if not report.exists():
        return out
    for bench in json.loads(report.read_text()).get("benchmarks", []):
        for req in bench["requests"]["successful"]:
            nonce = nonce_in(req.get("request_args") or "")
            if nonce and req.get("time_to_first_token_ms") is not None:
                out[nonce] = float(req["time_to_first_token_ms"])
    return out


def run_bench(url, out, requests, concurrency, words, output_tokens, prefix, timeout_s, bench_bin):
    """bench's own sweep: batches of `concurrency` cold streaming requests of the same size; its
    records carry each request's nonce and ttft_ms."""
    del prefix  # bench makes its own nonces
    command = [
        bench_bin, "sweep", "--server", url, "--preset", "openai", "--contexts", str(words + TEMPLATE),
        "--modes", "streaming", "--cache-states", "cold", "--batch-sizes", str(concurrency),
        "--runs", str(max(requests // concurrency, 1)), "--output-tokens", str(output_tokens),
        "--thermal", "off", "--out", str(out / "bench"), "--quiet",
    ]
    code, cpu, wall = run_measured(command, out, out / "bench.log", timeout_s)
    ttfts = {}
    for records in (out / "bench").glob("*/measurements.jsonl"):
        for line in records.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("record_type") == "measurement" and rec.get("ttft_ms") is not None and not rec.get("error"):
                ttfts[rec["nonce"]] = float(rec["ttft_ms"])
    return code, cpu, wall, ttfts


def nonce_in(text):
    at = text.find("[ref ")
    if at < 0:
        return None
    digits = text[at + 5: at + 17]
    return digits if digits.isdigit() and text[at + 17: at + 18] == "]" else None


# --- the server and its log ----------------------------------------------------------------------


class Server:
    """bench-scripted-server with a timing log, stopped (SIGTERM) on exit."""

    def __init__(self, binary, log, first_token_ms, token_ms):
        self.log = log
        self.proc = subprocess.Popen(
            [binary, "--port", "0", "--first-token-ms", str(first_token_ms), "--token-ms", str(token_ms),
             "--log", str(log)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            raise SystemExit(f"anchors: {binary} printed no URL")

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def read_log(path, expect):
    """nonce -> the server's log line (crates/scripted/src/trace.rs), once `expect` requests are logged
    (or after 10 s: the server logs a stream just after its last byte)."""
    deadline = time.monotonic() + 10
    while True:
        by_nonce = {}
        for line in Path(path).read_text().splitlines():
            try:
                t = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written
            if t.get("record_type") == "request" and t.get("nonce"):
                by_nonce[t["nonce"]] = t
        if len(by_nonce) >= expect or time.monotonic() > deadline:
            return by_nonce
        time.sleep(0.05)


def percentile(values, p):
    """The same nearest-rank percentile as benches/external.rs, rounded to the microsecond; None
    without values (JSON has no NaN)."""
    if not values:
        return None
    s = sorted(values)
    return round(s[int(round((len(s) - 1) * p))], 3)


def errors(client_ttfts, log, skip):
    """TTFT errors (ms) of the requests both sides saw complete, in the order the server read
    them, the first `skip` left out (they opened the client's connections)."""
    both = []
    for nonce, ttft in client_ttfts.items():
        t = log.get(nonce)
        if t and t.get("completed") and t.get("first_content_ns") is not None:
            server_ms = (t["first_content_ns"] - t["body_read_ns"]) / 1e6
            both.append((t["body_read_ns"], ttft - server_ms))
    both.sort()
    return [e for _, e in both[skip:]], len(both)


def measure(name, server_bin, bench_bin, out, requests, concurrency, words, output_tokens, prefix, timeout_s,
            first_token_ms, token_ms, skip):
    out.mkdir(parents=True, exist_ok=True)
    with Server(server_bin, out / "server.jsonl", first_token_ms, token_ms) as server:
        args = (server.url, out, requests, concurrency, words, output_tokens, prefix, timeout_s)
        if name == "bench":
            code, cpu, wall, ttfts = run_bench(*args, bench_bin)
        elif name == "aiperf":
            code, cpu, wall, ttfts = run_aiperf(*args)
        else:
            code, cpu, wall, ttfts = run_guidellm(*args)
        log = read_log(server.log, len(ttfts))
    errs, matched = errors(ttfts, log, skip)
    return {
        "client": name, "concurrency": concurrency, "requests": requests, "exit_code": code,
        "client_ttfts": len(ttfts), "matched": matched, "n": len(errs),
        "ttft_error_p50_ms": percentile(errs, 0.5), "ttft_error_p99_ms": percentile(errs, 0.99),
        "cpu_s": round(cpu, 3), "cpu_s_per_100_requests": round(cpu / max(requests, 1) * 100, 3),
        "wall_s": round(wall, 1), "out": str(out),
    }


def default_bin(name):
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return str(target / "release" / name)


def cmd_client(args):
    """One client against a server already running (the tests' path): its own output files
    stay in --out; prints one JSON line (exit code, CPU, TTFTs it reported, matched in the log)."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = (args.url, out, args.requests, args.concurrency, args.words, args.output_tokens, args.prefix,
           args.timeout)
    code, cpu, wall, ttfts = (run_aiperf if args.name == "aiperf" else run_guidellm)(*run)
    summary = {"client": args.name, "exit_code": code, "cpu_s": round(cpu, 3), "wall_s": round(wall, 1),
               "client_ttfts": len(ttfts)}
    if args.server_log:
        log = read_log(args.server_log, len(ttfts))
        errs, matched = errors(ttfts, log, 0)
        summary.update(matched=matched, ttft_error_p50_ms=percentile(errs, 0.5))
    print(json.dumps(summary))
    return 0 if code == 0 else 1


def cmd_table(args):
    gone = missing()
    if gone:
        print("anchors not installed (bash scripts/anchors.sh install): missing " + ", ".join(gone), file=sys.stderr)
        return 2
    root = Path(args.out) / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    rows = []
    plan = [(1, args.requests_c1), (64, args.requests_c64)]
    print(f"TTFT error vs bench-scripted-server's log (first token {args.first_token_ms} ms, {args.token_ms} ms/token), "
          f"prompts of {args.words + TEMPLATE} tokens, {args.output_tokens} output tokens; {os.cpu_count()} cores "
          f"shared by client and server", file=sys.stderr)
    header = f"{'client':<9} {'conc':>4} {'n':>5} {'ttft err p50':>12} {'ttft err p99':>12} {'cpu s/100 req':>13}"
    print(header)
    for prefix, (concurrency, requests) in enumerate(plan):
        for k, name in enumerate(("bench", *CLIENTS)):
            row = measure(name, args.server_bin, args.bench_bin, root / f"{name}-c{concurrency}", requests,
                          concurrency, args.words, args.output_tokens, prefix * 10 + k + 1, args.timeout,
                          args.first_token_ms, args.token_ms, concurrency)
            rows.append(row)
            ms = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
            print(f"{name:<9} {concurrency:>4} {row['n']:>5} {ms(row['ttft_error_p50_ms']):>12} "
                  f"{ms(row['ttft_error_p99_ms']):>12} {row['cpu_s_per_100_requests']:>13.2f}"
                  + ("" if ok(row) else f"  (exit {row['exit_code']}: {row['out']})"), flush=True)
    (root / "anchors.json").write_text(json.dumps({"cores": os.cpu_count(), "rows": rows}, indent=1))
    print(f"written: {root / 'anchors.json'}", file=sys.stderr)
    return 0 if all(ok(r) and r["n"] > 0 for r in rows) else 1


def ok(row):
    """Whether the client's run ended as it should: bench's exit 1 is findings about the
    measurements (a stream the loaded machine delivered in a burst fails its quality gate), not
    a failed run; its TTFTs are still what it measured."""
    return row["exit_code"] == 0 or (row["client"] == "bench" and row["exit_code"] == 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    i = sub.add_parser("install", help="the pinned clients and the local tokenizer (reused when current)")
    i.add_argument("clients", nargs="*", choices=[[], *CLIENTS], help="only these (default: all; GuideLLM brings PyTorch, ~5.6 GB)")
    a = sub.add_parser("available", help="exit 0 when installed, else 1 naming what is missing")
    a.add_argument("clients", nargs="*", choices=[[], *CLIENTS], help="only these (default: all)")

    def shape(p):
        p.add_argument("--words", type=int, default=505, help="prompt words (server tokens less the template)")
        p.add_argument("--output-tokens", type=int, default=32)
        p.add_argument("--timeout", type=float, default=600, help="seconds one client run may take")

    c = sub.add_parser("client", help="one client's run against a running server")
    c.add_argument("name", choices=CLIENTS)
    c.add_argument("--url", required=True)
    c.add_argument("--out", required=True, help="directory for the prompts and the client's own output")
    c.add_argument("--requests", type=int, default=4)
    c.add_argument("--concurrency", type=int, default=2)
    c.add_argument("--prefix", type=int, default=9, help="first 4 digits of this run's nonces")
    c.add_argument("--server-log", help="the server's --log: count this run's requests in it")
    shape(c)

    t = sub.add_parser("table", help="bench, AIPerf and GuideLLM at concurrency 1 and 64")
    t.add_argument("--server-bin", default=default_bin("bench-scripted-server"))
    t.add_argument("--bench-bin", default=default_bin("bench"))
    t.add_argument("--out", default=str(CACHE / "runs"))
    t.add_argument("--requests-c1", type=int, default=100)
    t.add_argument("--requests-c64", type=int, default=256)
    t.add_argument("--first-token-ms", type=int, default=20)
    t.add_argument("--token-ms", type=float, default=1.0)
    shape(t)
    args = parser.parse_args()
    return {"install": cmd_install, "available": cmd_available, "client": cmd_client, "table": cmd_table}[
        args.command](args)


if __name__ == "__main__":
    sys.exit(main())
