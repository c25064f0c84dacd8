#!/usr/bin/env python3
"""Measure the two ceilings of the GPU a reference run is taken on, so decode and prefill can be shown
as fractions of what this very card does rather than of a datasheet.

  * HBM read bandwidth: a sum over a buffer of >= 8 GiB (far beyond the L2), one pass reads every
    byte once and writes one number, so bytes read / time is the read bandwidth. A device-to-device
    copy (bytes read + bytes written) is reported beside it for comparison with other tools.
  * Matrix throughput: 8192 x 8192 x 8192 products in fp16 and bf16 on random normal data (zeros
    run faster and would overstate the ceiling), 2 n^3 FLOP each, rotating over three input sets.

Every figure is the median of 20 samples after warm-ups, each sample CUDA events around 5 calls.
Run it on an idle GPU (scripts/gpu-reference.sh runs it before it starts llama-server).
Writes one JSON object (to --out, or stdout). Needs torch with CUDA.

Usage: gpu_probe.py [--out probe.json] [--read-gib 8] [--matmul-n 8192] [--reps 20]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys


def timed_ms(torch, fn, warmup: int, reps: int, per_sample: int = 5, warm_s: float = 2.0) -> list[float]:
    """Per-call times in ms: `reps` samples, each CUDA events around `per_sample` back-to-back calls
    (so a late launch by a busy CPU is amortized, not counted as GPU time), after at least `warmup`
    calls and `warm_s` seconds of them: an idle GPU needs a moment to raise its clocks (a first
    version warmed up with 5 products only and read fp16 10% under the bf16 measured right after)."""
    import time
    start = time.monotonic()
    done = 0
    while done < warmup or time.monotonic() - start < warm_s:
        fn()
        done += 1
        if done % 10 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_sample):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / per_sample)
    return times


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def nvidia_smi() -> dict:
    query = "name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": str(e)}
    fields = [f.strip() for f in out[0].split(",")] if out else []
    return dict(zip(query.split(","), fields))


def probe(read_gib: float, n: int, reps: int) -> dict:
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_probe.py: torch sees no CUDA device")
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    result = {
        "probe": "scripts/gpu_probe.py",
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": props.name,
        "multiprocessors": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nvidia_smi": nvidia_smi(),
    }

    # --- HBM read: fp32 sum over read_gib (fp32 accumulation, one output) ---
    elems = int(read_gib * 2**30) // 4
    buf = torch.empty(elems, dtype=torch.float32, device=dev)
    buf.uniform_(-1.0, 1.0)  # random, not zeros: every byte is real data
    nbytes = buf.numel() * buf.element_size()
    times = timed_ms(torch, lambda: buf.sum(), warmup=3, reps=reps)
    gbps = [nbytes / (t / 1e3) / 1e9 for t in times]
    result["hbm_read"] = {
        "bytes": nbytes, "method": "torch.sum over a float32 buffer (bytes read / time)",
        "ms": summary(times), "gbps": summary(gbps),
    }
    # --- device-to-device copy: half the buffer into the other half (read + write counted) ---
    half = elems // 2
    src, dst = buf[:half], buf[half:2 * half]
    times = timed_ms(torch, lambda: dst.copy_(src), warmup=3, reps=reps)
    moved = 2 * half * 4
    result["copy"] = {
        "bytes_read_plus_written": moved, "method": "Tensor.copy_ (bytes read + bytes written / time)",
        "ms": summary(times), "gbps": summary([moved / (t / 1e3) / 1e9 for t in times]),
    }
    del buf, src, dst
    torch.cuda.empty_cache()

    # --- dense matrix products ---
    result["matmul"] = {}
    flop = 2.0 * n * n * n
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        sets = [(torch.randn(n, n, dtype=dtype, device=dev), torch.randn(n, n, dtype=dtype, device=dev))
                for _ in range(3)]
        c = torch.empty(n, n, dtype=dtype, device=dev)
        i = [0]

        def mm():
            a, b = sets[i[0] % len(sets)]
            i[0] += 1
            torch.matmul(a, b, out=c)

        times = timed_ms(torch, mm, warmup=5, reps=reps)
        result["matmul"][name] = {
            "shape": [n, n, n], "method": "torch.matmul on random normal inputs, 3 rotating sets",
            "ms": summary(times), "tflops": summary([flop / (t / 1e3) / 1e12 for t in times]),
        }
        del sets, c
        torch.cuda.empty_cache()

    # The two numbers `bench verify --bandwidth-gbps --tflops` takes.
    result["ceilings"] = {
        "bandwidth_gbps": round(result["hbm_read"]["gbps"]["median"], 1),
        "tflops": round(result["matmul"]["fp16"]["tflops"]["median"], 1),
    }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write the JSON here (default: stdout)")
    ap.add_argument("--read-gib", type=float, default=8.0, help="size of the read buffer, GiB (>= 8)")
    ap.add_argument("--matmul-n", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    result = probe(args.read_gib, args.matmul_n, args.reps)
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        tmp = f"{args.out}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, args.out)
    else:
        sys.stdout.write(text)
    c = result["ceilings"]
    print(f"gpu_probe: {result['gpu']}: HBM read {c['bandwidth_gbps']} GB/s, "
          f"fp16 matmul {c['tflops']} TFLOP/s, bf16 {result['matmul']['bf16']['tflops']['median']:.1f}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
