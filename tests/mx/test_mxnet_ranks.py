"""tfring.mxnet on real ranks: the rank-side files in tests/mx run under mpirun at np=2 and np=3, all in one
pytest process per np; every rank checks its own values. The errors file goes last: it ends with a shutdown and a
fresh init. mxnet 1.9.1 needs numpy < 1.24, which TensorFlow 2.21 cannot share: these tests run in a separate
environment with mxnet (see README), and skip elsewhere."""
import re
import subprocess
import sys

import pytest

from conftest import ROOT, rank_env, run_rank_pytest, run_ranks

pytestmark = pytest.mark.slow  # real ranks under mpirun

pytest.importorskip("mxnet", reason="mxnet is not installed: tfring.mxnet is not built or tested")

FILES = ["tests/mx/ranks_mxnet_collectives.py", "tests/mx/ranks_mxnet_training.py",
         "tests/mx/ranks_mxnet_errors.py"]


@pytest.mark.parametrize("np_", [2, 3])
def test_mxnet_ranks(np_):
    run_rank_pytest(np_, FILES, timeout=900, extra_env={"TFRING_DYNAMIC_PROCESS_SETS": "1"})


def test_mxnet_gluon_digits_reaches_95_percent_at_np2():
    # The README's MXNet example through the launcher, as a user runs it.
    cmd = [sys.executable, "-m", "tfring.runner", "-np", "2", "python", "examples/mxnet_gluon_digits.py", "--epochs",
           "15", "--target-accuracy", "0.95"]
    proc = subprocess.run(cmd, cwd=ROOT, env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "[0]<stdout>:validation accuracy" in proc.stdout


@pytest.mark.parametrize("mode, np_, code", [("ok", 2, 0), ("raise", 2, 1), ("raise", 3, 1), ("slow_peer", 2, 0),
                                             ("slow_peer", 3, 0)])
def test_pending_mxnet_work_completes_before_tfring_shuts_down_at_exit(mode, np_, code):
    # tfring's atexit shutdown used to run before MXNet's engine had run the collectives still queued in it: they
    # failed with "tfring has been shut down" here and on the ranks reading them. tfring.mxnet.init registers an
    # exit handler that waits for the engine first.
    proc = run_ranks(np_, ["tests/mx/exit_pending_mxnet.py", mode], timeout=300)
    out = proc.stdout
    assert proc.returncode == code, out[-5000:]
    # (Not any "failed": mpirun's libevent may warn "Epoll MOD(1) on fd 21 failed" when a rank exits with 1.)
    assert "shut down" not in out and "Exception ignored" not in out, out[-5000:]
    assert not re.search(r"at exit: \w+ failed|pending at exit failed", out), out[-5000:]
    total = np_ * (np_ + 1) // 2
    for r in range(np_):
        # What the pending collectives wrote, read after tfring shut down: the sums over every rank.
        assert "rank %d at exit: inplace=%d\n" % (r, total) in out, out[-5000:]
        assert "rank %d at exit: summed=%d\n" % (r, total) in out, out[-5000:]
        if mode == "raise":
            assert "RuntimeError: user error at the end of rank %d" % r in out, out[-5000:]
        if mode == "slow_peer" and r > 0:
            assert "rank %d read summed=%d\n" % (r, total) in out, out[-5000:]


@pytest.mark.parametrize("mode, pattern", [
    ("failing", r"ranks disagree on shape for tensor 'allreduce\.exit\.mismatch'"),
    ("stalled", r"stalled collective: tensor 'allreduce\.exit\.only_rank_\d' .*TFRING_STALL_SHUTDOWN_TIME_SECONDS=5"),
])
def test_pending_mxnet_work_that_fails_at_exit_is_reported_in_one_line(mode, pattern):
    # A pending collective that cannot complete (ranks disagree; a name no other rank submits, which fails after
    # the stall shutdown time) never hangs the exit: one line per rank says why, the exit code stays the script's.
    env = rank_env()
    env.update(TFRING_STALL_CHECK_TIME_SECONDS="2", TFRING_STALL_SHUTDOWN_TIME_SECONDS="5")
    proc = run_ranks(2, ["tests/mx/exit_pending_mxnet.py", mode], timeout=300, env=env)
    out = proc.stdout
    assert proc.returncode == 0, out[-5000:]
    lines = [ln for ln in out.splitlines() if ln.startswith("tfring.mxnet: MXNet work still pending at exit failed: ")]
    assert len(lines) == 2 and all(re.search(pattern, ln) for ln in lines), out[-5000:]
    assert "Traceback" not in out and "Exception ignored" not in out, out[-5000:]
