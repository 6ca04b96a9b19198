"""One job of tests/jx/test_compiled_killed_rank.py: every rank runs a compiled allreduce step (jax.jit, or TensorFlow's
tf.function(jit_compile=True): argv[1] is "jax" or "tf"); every rank goes on running steps, and 2 s later the last
rank dies (argv[2]: "exit" leaves by os._exit(0) without finalizing, "kill" by SIGKILL), wherever its step is. Each
survivor prints one line: the error it got and after how long.

    mpirun --with-ft ulfm -np N python tests/jx/compiled_kill_job.py jax|tf exit|kill
"""
import mpi4py

mpi4py.rc.finalize = False  # an exiting rank must not wait in MPI_Finalize for the dead one

import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

if sys.argv[1] == "jax":
    import jax
    import jax.numpy as jnp

    import tfring.jax as hvd
    step = jax.jit(lambda t: hvd.allreduce(t, op=hvd.Sum, name="killed_step"))

    def run(x):
        return np.asarray(jax.block_until_ready(step(jnp.asarray(x))))
else:
    import tensorflow as tf

    import tfring as hvd
    step = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum, name="killed_step"), jit_compile=True)

    def run(x):
        return step(tf.constant(x)).numpy()

hvd.init()
R, N = hvd.rank(), hvd.size()
np.testing.assert_array_equal(run(np.ones(4, np.float32)), np.full(4, float(N)))  # compiled, working everywhere
x = np.ones(1 << 20, np.float32)  # 4 MiB: a step spends its time in the transfer as much as in negotiation
if R == N - 1:
    def die():
        time.sleep(2)  # mid-training: inside a compiled step's negotiation or its transfer, wherever it falls
        if sys.argv[2] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(0)  # (a non-zero code makes mpirun end the whole job, even under ULFM)
    threading.Thread(target=die, daemon=True).start()
start, steps = time.time(), 0
try:
    while time.time() - start < 300:  # the test's deadline is far shorter: this only bounds a job left alone
        run(x)
        steps += 1
    outcome = "no error"
except Exception as e:  # noqa: BLE001 - the test reads what it was
    outcome = "%s: %s" % (type(e).__name__, " ".join(str(e).split()))
print("survivor %d after %.1f s and %d steps: %s" % (R, time.time() - start, steps, outcome), flush=True)
os._exit(0)  # the runtime's communicators are revoked: leave without finalizing
