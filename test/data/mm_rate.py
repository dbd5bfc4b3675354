"""The plain-PyTorch side of test/flops_test.cpp's calibration check: times torch.mm of two
N x N matrices as bench::calibrate() does (one warm-up product, then 7 samples of REPS
products each) and prints the fastest sample's FLOP/s.

Usage: mm_rate.py N REPS THREADS PRECISION   (PRECISION: fp32 | bf16)
       mm_rate.py                            the same arguments, one request a line on stdin,
                                             one answer a line (torch imported once)
"""
import sys
import time

import torch


def rate(n, reps, threads, precision):
    torch.set_num_threads(threads)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    a, b = torch.rand(n, n, dtype=dtype), torch.rand(n, n, dtype=dtype)
    c = torch.empty(n, n, dtype=dtype)
    with torch.no_grad():
        torch.mm(a, b, out=c)
        rates = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b, out=c)
            rates.append(2.0 * n**3 * reps / (time.perf_counter() - t0))
    return max(rates)


def main():
    if len(sys.argv) > 1:
        n, reps, threads, precision = sys.argv[1:5]
        print(rate(int(n), int(reps), int(threads), precision))
        return
    for line in sys.stdin:
        n, reps, threads, precision = line.split()
        print(rate(int(n), int(reps), int(threads), precision), flush=True)


if __name__ == "__main__":
    main()
