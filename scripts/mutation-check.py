#!/usr/bin/env python3
"""Mutation check: does each guarantee's cited test fail when the line behind it breaks?

Each entry of scripts/mutations.toml names a guarantee (a row of docs/guarantees.md), one exact
piece of source behind it, what to put in its place (the break: a check skipped, a bound
loosened), and the cargo test invocations the guarantee's row cites. For each entry this script
applies the break, builds, runs those tests, and puts the source back (always: on failure, on
Ctrl-C). The entry is

  caught         the tests ran and at least one failed (what they are for);
  MISSED         the tests ran and passed with the guarantee broken (a test that cannot fail);
  did not build  the break does not compile (fix the entry);
  stale          the source no longer holds the text exactly once (fix the entry).

First the cited tests run unbroken and must pass: a test that fails anyway proves nothing.

  python3 scripts/mutation-check.py                 # every entry
  python3 scripts/mutation-check.py --only NAME     # one entry (repeatable)
  python3 scripts/mutation-check.py --write docs/mutations.md   # refresh the table there

Exit 0 when every entry is caught, 1 otherwise, 2 on bad input.
"""

import argparse
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- mutation-check:begin -->", "<!-- mutation-check:end -->"


def load(path):
    try:
        entries = tomllib.loads(path.read_text())["mutation"]
    except (OSError, tomllib.TOMLDecodeError, KeyError) as e:
        sys.exit(f"mutation-check: cannot read {path}: {e}")
    names = set()
    for i, e in enumerate(entries):
        missing = [k for k in ("name", "guarantee", "what", "file", "find", "replace", "tests") if k not in e]
        if missing:
            sys.exit(f"mutation-check: {path}: entry {i + 1} lacks {', '.join(missing)}")
        if e["name"] in names:
            sys.exit(f"mutation-check: {path}: two entries named {e['name']}")
        names.add(e["name"])
    return entries


def cargo_test(invocation, log):
    """Runs `cargo test INVOCATION`; (built, passed)."""
    cmd = ["cargo", "test", "--quiet", *invocation.split()]
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        rc = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
    text = Path(log).read_text(errors="replace")
    tail = text[text.rfind("$ cargo") :]
    built = "could not compile" not in tail and "error[E" not in tail and "error: could not" not in tail
    return built, rc == 0


def run_all(invocations, log):
    """(built, every invocation passed)."""
    for inv in invocations:
        built, passed = cargo_test(inv, log)
        if not built or not passed:
            return built, False
    return True, True


def check(entry, log):
    path = ROOT / entry["file"]
    original = path.read_text()
    if original.count(entry["find"]) != 1:
        return "stale"
    restore = lambda *_: path.write_text(original)  # noqa: E731
    previous = signal.signal(signal.SIGINT, lambda *a: (restore(), sys.exit(130)))
    try:
        path.write_text(original.replace(entry["find"], entry["replace"], 1))
        built, passed = run_all(entry["tests"], log)
    finally:
        restore()
        signal.signal(signal.SIGINT, previous)
    if not built:
        return "did not build"
    return "MISSED" if passed else "caught"


def table(rows):
    lines = ["| guarantee | break | tests | result |", "| --- | --- | --- | --- |"]
    for e, result in rows:
        tests = ", ".join(f"`cargo test {t}`" for t in e["tests"])
        lines.append(f"| {e['guarantee']} | `{e['name']}`: {e['what']} | {tests} | {result} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", default=str(ROOT / "scripts/mutations.toml"))
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--write", help="replace the table between the mutation-check markers of this file")
    ap.add_argument("--log", default=str(ROOT / "target/mutation-check.log"))
    args = ap.parse_args()
    entries = load(Path(args.list))
    if args.only:
        unknown = set(args.only) - {e["name"] for e in entries}
        if unknown:
            sys.exit(f"mutation-check: no entry named {', '.join(sorted(unknown))}")
        entries = [e for e in entries if e["name"] in args.only]
    Path(args.log).parent.mkdir(parents=True, exist_ok=True)
    Path(args.log).write_text("")
    started = time.monotonic()
    baseline = sorted({t for e in entries for t in e["tests"]})
    print(f"baseline: {len(baseline)} test invocations, unbroken ...", file=sys.stderr, flush=True)
    built, passed = run_all(baseline, args.log)
    if not (built and passed):
        sys.exit(f"mutation-check: the cited tests fail unbroken (see {args.log}): nothing can be judged")
    rows = []
    for e in entries:
        t0 = time.monotonic()
        result = check(e, args.log)
        rows.append((e, result))
        print(f"{result:>13}  {e['name']}  ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    text = table(rows)
    print(text)
    caught = sum(1 for _, r in rows if r == "caught")
    print(f"\n{caught} of {len(rows)} caught in {time.monotonic() - started:.0f} s", file=sys.stderr)
    if args.write:
        doc = Path(args.write)
        body = doc.read_text()
        if BEGIN not in body or END not in body:
            sys.exit(f"mutation-check: {doc} has no {BEGIN} ... {END} markers")
        head, rest = body.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        doc.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    os.environ.setdefault("CARGO_TERM_COLOR", "never")
    sys.exit(main())
