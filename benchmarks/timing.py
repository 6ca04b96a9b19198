"""Shared by the benchmark scripts: one timing rule, so their numbers compare."""
import time

import numpy as np
from mpi4py import MPI


def median_ms(fn, iters, comm=MPI.COMM_WORLD):
    """Median ms per call after two warm-up calls (tracing, cache fill); every call starts after a barrier, and
    the slowest rank's median counts, since a collective is as slow as its slowest rank."""
    fn()
    fn()
    times = []
    for _ in range(iters):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * comm.allreduce(float(np.median(times)), op=MPI.MAX)
