"""Durable commits (#45 item 4): `tfringrun --commit-dir DIR` writes every commit to DIR in the background, and a job
started again with DIR resumes from the newest complete commit. On real ranks: a job at np=3 is lost as a whole
(tfringrun and every rank SIGKILLed mid-training, as when the launcher's machine dies); started again at np=2, in
elastic mode, with the same DIR it resumes from the last commit on disk and ends with the weights one process gets
on the whole batch. In-process: the writer (never holds the step for the disk, keeps only the newest, flushes),
the atomic file (a failed write leaves the previous commit), the reader (newest wins, a damaged file is skipped),
who reads at which sync, and the flag's checks."""
import glob
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, kill_session, one_process_sgd, rank_env
from tfring.common.elastic import checkpoint
from tfring.runner import checks
from tfring.runner.flags import UsageError, build_parser
from tfring.runner.mpirun import plan
from tfring.runner.processes import descendants

JOB = os.path.join(ROOT, "tests", "elastic", "commit_job.py")


def _steps(out):
    rows = []
    for f in glob.glob(os.path.join(str(out), "steps.*.jsonl")):
        rows += [json.loads(line) for line in open(f) if line.strip()]
    return rows


def _launch(out, args, env=None):
    out.mkdir()
    e = dict(rank_env(), COMMIT_OUT=str(out), **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "tfring.runner"] + args + ["python", JOB], cwd=ROOT, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


@pytest.mark.slow  # real ranks
def test_a_job_lost_as_a_whole_resumes_from_its_last_commit_on_disk(tmp_path):
    torch = pytest.importorskip("torch")
    commits = tmp_path / "commits"
    first = _launch(tmp_path / "a", ["-np", "3", "--commit-dir", str(commits)], {"COMMIT_STEP_SLEEP": "0.1"})
    deadline = time.time() + 120
    while time.time() < deadline and max([r["step"] for r in _steps(tmp_path / "a")] or [0]) < 12:
        assert first.poll() is None, first.communicate()[0][-5000:]
        time.sleep(0.05)
    for pid in [first.pid] + descendants(first.pid):  # tfringrun, mpirun, every rank: nothing gets to clean up
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    kill_session(first.pid)
    first.communicate()
    done = max(r["step"] for r in _steps(tmp_path / "a"))
    assert 12 <= done < 40
    files = glob.glob(str(commits / "commit.*.pkl"))
    assert len(files) == 1, files  # one host: its first rank's file
    assert stat.S_IMODE(os.stat(str(commits)).st_mode) == 0o700
    on_disk = checkpoint.newest(str(commits))[0]
    # Written in the background: usually the last step's commit (a step logs after its commit), a slow fsync behind.
    assert done - 10 <= on_disk <= done + 1, (on_disk, done)

    # Started again elsewhere in elastic mode, at another size.
    second = _launch(tmp_path / "b", ["-np", "2", "--min-np", "2", "--commit-dir", str(commits)])
    try:
        out, _ = second.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        kill_session(second.pid)
        pytest.fail("the resumed job still runs after 300 s: %s" % second.communicate()[0][-5000:])
    assert second.returncode == 0, out[-5000:]
    assert "tfring.elastic: resuming from commit %d in %s" % (on_disk, commits) in out, out[-5000:]
    rows = _steps(tmp_path / "b")
    for rank in (0, 1):
        mine = [r["step"] for r in rows if r["rank"] == rank]
        assert mine == list(range(on_disk + 1, 41)), mine  # from the commit on, nothing redone or skipped
    finals = [torch.load(f) for f in sorted(glob.glob(str(tmp_path / "b" / "final.*.pt")))]
    assert len(finals) == 2 and all(f["step"] == 40 and f["size"] == 2 for f in finals)
    generator = torch.Generator().manual_seed(0)  # commit_job.py's data
    x = torch.randn(12, 8, generator=generator)
    want = one_process_sgd(x, x @ torch.randn(8, 1, generator=generator), 40, 0.05)
    for f in finals:
        for name, value in want.items():
            torch.testing.assert_close(f["params"][name], value, rtol=1e-5, atol=1e-6)
    assert checkpoint.newest(str(commits))[0] == 40


def test_the_writer_never_holds_the_step_keeps_the_newest_and_flushes(tmp_path):
    release, written = threading.Event(), []

    def slow_write(path, data):
        release.wait(30)
        written.append((path, data))
    writer = checkpoint.Writer(write=slow_write)
    writer.put("p", 0)
    deadline = time.monotonic() + 30
    while not writer._busy and time.monotonic() < deadline:  # the writer took 0 and is blocked writing it
        time.sleep(0.01)
    for i in range(1, 5):  # 1, 2 and 3 are each replaced by the next before the writer is free
        writer.put("p", i)
    assert written == []  # every put returned while the write of 0 is still held: none waited for the disk
    assert writer.flush(0.2) is False  # still writing
    release.set()
    assert writer.flush(10) is True
    assert written == [("p", 0), ("p", 4)] and writer.written == 2


def test_a_failed_write_leaves_the_previous_commit_and_says_so_once(tmp_path, capsys, monkeypatch):
    path = str(tmp_path / "d" / "commit.h.pkl")
    checkpoint.write_atomically(path, b"old")
    assert stat.S_IMODE(os.stat(str(tmp_path / "d")).st_mode) == 0o700

    def no_rename(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(checkpoint.os, "replace", no_rename)
    writer = checkpoint.Writer()
    for data in (b"new", b"newer"):
        writer.put(path, data)
        assert writer.flush(10)
    assert open(path, "rb").read() == b"old"
    err = capsys.readouterr().err
    assert err.count("tfring.elastic: cannot write the commit to %s" % path) == 1, err
    assert "No space left on device" in err


def test_the_newest_complete_commit_wins_and_a_damaged_file_is_skipped(tmp_path, capsys):
    import cloudpickle
    for host, commit in (("a", 7), ("b", 9), ("c", 3)):
        (tmp_path / ("commit.%s.pkl" % host)).write_bytes(cloudpickle.dumps({"commit": commit, "snapshot": host}))
    (tmp_path / "commit.d.pkl").write_bytes(b"\x80\x05half a fi")
    (tmp_path / "commit.e.pkl.123.tmp").write_bytes(cloudpickle.dumps({"commit": 99, "snapshot": "partial"}))
    assert checkpoint.newest(str(tmp_path)) == (9, "b")
    assert "skipping the unreadable commit file %s" % (tmp_path / "commit.d.pkl") in capsys.readouterr().err
    assert checkpoint.newest(str(tmp_path / "none")) is None


def test_commit_dir_flag_is_made_absolute_created_and_passed_to_the_ranks(tmp_path, monkeypatch):
    monkeypatch.chdir(str(tmp_path))
    args = build_parser().parse_args(["-np", "2", "--commit-dir", "state/run1", "python", "x.py"])
    checks.check(args)
    assert args.commit_dir == str(tmp_path / "state" / "run1")
    assert stat.S_IMODE(os.stat(args.commit_dir).st_mode) == 0o700
    _, env = plan(args, {})
    assert env["TFRING_COMMIT_DIR"] == args.commit_dir
    (tmp_path / "afile").write_text("")
    bad = build_parser().parse_args(["-np", "2", "--commit-dir", "afile/sub", "python", "x.py"])
    with pytest.raises(UsageError, match=r"--commit-dir: 'afile/sub' is not a directory that can be used"):
        checks.check(bad)


def test_only_the_first_sync_of_a_process_that_started_with_the_job_reads_the_disk(monkeypatch):
    from tfring.common.elastic import membership
    monkeypatch.setattr(checkpoint, "_synced", False)
    assert checkpoint.first_sync() is True  # the job's first sync: every rank alike
    assert checkpoint.first_sync() is False  # after a failure or a growth: the commit in memory is newer
    monkeypatch.setattr(checkpoint, "_synced", False)
    monkeypatch.setattr(membership, "_spawned", [True])
    assert checkpoint.first_sync() is False  # a rank a growth added: the others' n-th sync
    monkeypatch.setenv("TFRING_COMMIT_DIR", "/somewhere")
    monkeypatch.delenv("TFRING_ELASTIC_RESTART", raising=False)
    assert checkpoint.resumable() is True
    monkeypatch.delenv("TFRING_COMMIT_DIR")
    monkeypatch.setenv("TFRING_ELASTIC_STATE_DIR", "/private")
    assert checkpoint.resumable() is False  # the launcher's private directory: read only after its restart
    monkeypatch.setenv("TFRING_ELASTIC_RESTART", "1")
    assert checkpoint.resumable() is True


def test_a_state_that_cannot_be_pickled_is_said_once_and_the_job_goes_on(tmp_path, capsys):
    path = str(tmp_path / "commit.h.pkl")
    writer = checkpoint.Writer()
    for _ in range(3):
        writer.put(path, {"commit": 1, "snapshot": threading.Lock()})  # a lock cannot be pickled
        assert writer.flush(10)
    writer.put(path, {"commit": 2, "snapshot": "fine"})
    assert writer.flush(10) and checkpoint.newest(str(tmp_path)) == (2, "fine")
    err = capsys.readouterr().err
    assert err.count("tfring.elastic: cannot write the commit to %s: " % path) == 1 and "lock" in err, err


def test_a_job_started_again_takes_up_the_commit_at_its_first_sync_only(tmp_path, monkeypatch, capsys):
    import cloudpickle

    from tfring.common.elastic import state as state_module
    from tfring.common.elastic import world
    monkeypatch.setattr(world, "rank_is_root", lambda: True)
    monkeypatch.setattr(checkpoint, "_synced", False)
    monkeypatch.setenv("TFRING_COMMIT_DIR", str(tmp_path))
    (tmp_path / "commit.h.pkl").write_bytes(cloudpickle.dumps(
        {"commit": 6, "snapshot": {"objects": {"epoch": 3, "batch": 7}}}))
    sent = []
    state = state_module.ObjectState(bcast_object=lambda obj: sent.append(obj) or obj, epoch=0, batch=0, lr=0.1)
    state.sync()
    assert (state.epoch, state.batch, state.lr, state._commits) == (3, 7, 0.1, 6)  # lr: added since the commit
    assert sent[0] is None  # every rank learnt that the resume worked
    assert "tfring.elastic: resuming from commit 6 in %s" % tmp_path in capsys.readouterr().err
    state.lr = 0.5
    state.restore()
    assert (state.epoch, state.lr) == (3, 0.1)  # lr is part of the state still: it rolls back too
    saved = []
    monkeypatch.setattr(checkpoint, "save", lambda snapshot, commit: saved.append(commit))
    state.epoch = 4
    state.commit()
    assert saved == [7]  # numbered on from the commit taken up
    state.restore()
    state.sync()  # a later sync (after a failure or a growth): the commit in memory, not the disk
    assert (state.epoch, state._commits) == (4, 7)


def test_a_commit_that_cannot_be_taken_up_fails_every_rank_naming_the_directory(tmp_path, monkeypatch):
    import cloudpickle

    from tfring.common.elastic import state as state_module
    from tfring.common.elastic import world
    monkeypatch.setattr(world, "rank_is_root", lambda: True)
    monkeypatch.setattr(checkpoint, "_synced", False)
    monkeypatch.setenv("TFRING_COMMIT_DIR", str(tmp_path))
    (tmp_path / "commit.h.pkl").write_bytes(cloudpickle.dumps({"commit": 2, "snapshot": {"not objects": 1}}))
    sent = []
    state = state_module.ObjectState(bcast_object=lambda obj: sent.append(obj) or obj, epoch=0)
    with pytest.raises(RuntimeError, match=r"cannot resume from the commit in %s: KeyError" % tmp_path):
        state.sync()
    assert sent and "KeyError" in sent[0]  # the error travels to every rank before anyone raises
