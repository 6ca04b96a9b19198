"""Shared by the benchmark scripts: one timing rule, so their numbers compare."""
import time

import numpy as np
from mpi4py import MPI

from impl import minor_faults


def median_ms(fn, iters, comm=MPI.COMM_WORLD):
    """Median ms per call after two warm-up calls (tracing, cache fill); every call starts after a barrier, and
    the slowest rank's median counts, since a collective is as slow as its slowest rank."""
    return measure(fn, iters, comm)[0]


def measure(fn, iters, comm=MPI.COMM_WORLD):
    """(median ms as median_ms, minor page faults per call on the rank with the most)."""
    fn()
    fn()
    times = []
    faults = minor_faults()
    for _ in range(iters):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    faults = (minor_faults() - faults) / iters
    return (1000 * comm.allreduce(float(np.median(times)), op=MPI.MAX), comm.allreduce(faults, op=MPI.MAX))
