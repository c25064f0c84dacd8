#!/usr/bin/env python3
"""Do two runs of the same plan write the same records? (a refactor must not change what bench writes)

    python3 scripts/same-records.py BEFORE_RUN_DIR AFTER_RUN_DIR

Timing values differ from run to run; what must not differ is the shape and every value that the
plan and the server decide (a load run: the shape and config only, its request count is the
server's speed): the same records (by cell and position), each with the same fields
(nested ones included), the same token counts, max_tokens, finish reasons and cache evidence
source, and a run.json with the same sections and the same config (run ids, paths and clocks
aside). Prints each difference; exit 1 when there is one, 0 when the runs agree.
"""
import json
import sys
from pathlib import Path

# Values decided by the plan and the server, not by the clock.
DECIDED = ["record_type", "scenario", "cache_state", "mode", "context_tokens", "batch_size", "run",
           "request_index", "expected_input_tokens", "max_tokens", "finish_reason", "dataset_row"]
# Keys of a record's position in the run (a load's arrivals are decided by its seed).
POSITION = ["record_type", "scenario", "cache_state", "mode", "context_tokens", "batch_size", "run",
            "request_index", "dataset_row", "concurrency", "user_id", "arrival_index"]
# run.json fields that name this run or this moment, not the plan.
# (`server`: the URL of a server started for the run, whose port is the kernel's choice.)
VOLATILE = {"run_id", "started_at", "ended_at", "out", "git_sha", "resumed_at", "slot_dir", "server"}


def shape(value, path=""):
    """Every key path in a JSON value (list items merged), so a renamed or lost field shows."""
    out = set()
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(f"{path}.{k}")
            out |= shape(v, f"{path}.{k}")
    elif isinstance(value, list):
        for v in value:
            out |= shape(v, f"{path}[]")
    return out


def records(run):
    with open(run / "measurements.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def position(r):
    return tuple(str(r.get(k)) for k in POSITION)


def without_volatile(value):
    if isinstance(value, dict):
        return {k: without_volatile(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [without_volatile(v) for v in value]
    return value


def compare(before, after):
    problems = []
    a, b = records(before), records(after)
    # A load's closed-loop levels send as many requests as the server's speed allows: its records
    # are compared by shape only.
    if len(a) != len(b) and "load" not in before.name:
        problems.append(f"records: {len(a)} before, {len(b)} after")
    by_pos = {position(r): r for r in b}
    missing = [position(r) for r in a if position(r) not in by_pos]
    if missing and "load" not in before.name:
        problems.append(f"{len(missing)} records of before have no twin after, e.g. {missing[0]}")
    shapes_a = set().union(*(shape(r) for r in a)) if a else set()
    shapes_b = set().union(*(shape(r) for r in b)) if b else set()
    for p in sorted(shapes_a - shapes_b):
        problems.append(f"field only before: {p}")
    for p in sorted(shapes_b - shapes_a):
        problems.append(f"field only after: {p}")
    if "load" not in before.name:
        for r in a:
            twin = by_pos.get(position(r))
            if twin is None:
                continue
            for k in DECIDED:
                if r.get(k) != twin.get(k):
                    problems.append(f"{position(r)}: {k} {r.get(k)!r} before, {twin.get(k)!r} after")
            src = lambda x: (x.get("cache_evidence") or {}).get("source")
            if src(r) != src(twin):
                problems.append(f"{position(r)}: cache evidence source {src(r)} before, {src(twin)} after")
    meta_a = json.loads((before / "run.json").read_text())
    meta_b = json.loads((after / "run.json").read_text())
    for p in sorted(shape(meta_a) - shape(meta_b)):
        problems.append(f"run.json field only before: {p}")
    for p in sorted(shape(meta_b) - shape(meta_a)):
        problems.append(f"run.json field only after: {p}")
    if without_volatile(meta_a.get("config")) != without_volatile(meta_b.get("config")):
        problems.append("run.json config differs")
    return problems, len(a), len(b)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    before, after = Path(sys.argv[1]), Path(sys.argv[2])
    problems, n_a, n_b = compare(before, after)
    for p in problems:
        print(f"{before.name} / {after.name}: {p}")
    print(f"{before.name} / {after.name}: {n_a} / {n_b} records, {len(problems)} differences", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
