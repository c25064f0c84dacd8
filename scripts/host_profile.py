#!/usr/bin/env python3
"""Measure this machine's ceilings for `bench --bandwidth-gbps N --tflops N` (needs numpy).

Read bandwidth: a matrix-vector product over a large float32 matrix is memory bound and runs on
every core (BLAS), so bytes / time is what the cores can stream. Compute: a float32 GEMM. The best
of several repetitions is kept: a ceiling must be an upper bound, and a busy machine only slows.
These are measured, not vendor figures: a CPU llama.cpp build can exceed an f32 GEMM somewhat with
wider kernels, so the figures are printed with their margin in mind (see docs/sweep.md, Physics).
"""
import json
import time

import numpy as np


def best(f, n=5):
    times = []
    for _ in range(n):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    result = {}
    for mb in (32, 256, 1024):
        matrix = np.random.rand(mb * 1024 * 1024 // 4 // 1024, 1024).astype(np.float32)
        vector = np.ones(1024, np.float32)
        result[f"read_gbps_{mb}MB"] = round(matrix.nbytes / best(lambda: matrix @ vector) / 1e9, 1)
    n = 2048
    b = np.random.rand(n, n).astype(np.float32)
    result["f32_gemm_tflops"] = round(2 * n**3 / best(lambda: b @ b, 3) / 1e12, 3)
    bandwidth = max(v for k, v in result.items() if k.startswith("read_"))
    print(json.dumps(result, indent=1))
    print(f"flags: --bandwidth-gbps {bandwidth:.0f} --tflops {result['f32_gemm_tflops']:.2f}")


if __name__ == "__main__":
    main()
