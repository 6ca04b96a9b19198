"""A rank that dies while the others run compiled steps (jax.jit; TensorFlow's tf.function(jit_compile=True), both
through the XLA FFI handlers in tfring/cc/xla), under `mpirun --with-ft ulfm` as tfringrun's elastic jobs run: every
survivor's step fails with the core's worker-failure error (ABORTED) within seconds, never a hang, whether the death
falls in the step's negotiation or its transfer. Without ULFM mpirun ends the whole job instead (tests/runner/
test_runner.py checks that for eager steps). The job: tests/jx/compiled_kill_job.py."""
import re

import pytest

from conftest import run_ranks

pytestmark = pytest.mark.slow  # real ranks under mpirun

# Each framework at both sizes, each way of dying once per framework.
CASES = [("jax", 2, "exit"), ("jax", 3, "kill"), ("tf", 2, "kill"), ("tf", 3, "exit")]
ERRORS = {"jax": "JaxRuntimeError: ABORTED: ", "tf": "AbortedError: "}
DEATH_AT, DEADLINE = 2.0, 30.0  # the last rank dies 2 s into the steps; survivors must know within 30 s of it


@pytest.mark.parametrize("framework,np_,how", CASES, ids=["%s-np%d-%s" % c for c in CASES])
def test_survivors_of_a_dead_rank_get_an_error_inside_compiled_steps(framework, np_, how):
    for module in (("jax", "optax") if framework == "jax" else ("tensorflow",)):
        pytest.importorskip(module)
    proc = run_ranks(np_, ["tests/jx/compiled_kill_job.py", framework, how], timeout=240,
                     mpirun_args=["--with-ft", "ulfm"])
    out = proc.stdout[-6000:]
    survivors = re.findall(r"survivor (\d+) after ([\d.]+) s and (\d+) steps: (.*)", proc.stdout)
    assert sorted(int(s[0]) for s in survivors) == list(range(np_ - 1)), out
    for rank, took, steps, outcome in survivors:
        assert int(steps) > 0, out  # the dead rank's peers had trained with it before
        assert outcome.startswith(ERRORS[framework] + "tfring: a worker process failed or left the job"), out
        assert float(took) < DEATH_AT + DEADLINE, out
