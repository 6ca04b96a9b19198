"""`python -m tfring.migrate` on whole Horovod scripts of the Keras 2 era: the report names every construct with its
line, `--write` rewrites the mechanical ones (the result parses, the rest stays reported, the original is kept), the
exit status says whether anything is left, and a Keras 2 training script that fails on Keras 3 trains on 2 ranks
after the rewrite."""
import ast
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import rank_env

HERE = os.path.dirname(os.path.abspath(__file__))
EVERYTHING = os.path.join(HERE, "horovod_keras2_everything.py")
JOB = os.path.join(HERE, "horovod_keras2_job.py")
FINDING = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+): \[(?P<rule>[\w-]+)\] (?P<rest>.*)$")
FRAMEWORKS = ("tensorflow", "keras", "tf_keras", "torch", "mxnet", "pyspark", "ray")


def migrate(*args, cwd):
    """Runs the CLI the way a user does (a fresh interpreter); returns (exit status, stdout lines)."""
    proc = subprocess.run([sys.executable, "-m", "tfring.migrate"] + list(args), cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    assert not proc.stderr, proc.stderr
    return proc.returncode, proc.stdout.splitlines()


def findings(lines):
    """{(line, rule): state} from the CLI's output (state: 'fixable with --write', 'needs a manual change', 'fixed')."""
    out = {}
    for text in lines:
        m = FINDING.match(text)
        if m:
            out[(int(m.group("line")), m.group("rule"))] = m.group("rest").rsplit("(", 1)[1].rstrip(")")
    return out


def expected(path):
    """{(line, rule)} from the `# expect: rule, rule` markers of a test script."""
    want = set()
    with open(path) as f:
        for number, text in enumerate(f, 1):
            m = re.search(r"# expect: ([\w\-, ]+)$", text.rstrip())
            if m:
                want |= {(number, rule.strip()) for rule in m.group(1).split(",")}
    return want


def test_report_lists_every_construct_with_its_line(tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(EVERYTHING, script)
    status, lines = migrate("train.py", cwd=tmp_path)
    assert status == 1, lines
    found = findings(lines)
    want = expected(EVERYTHING)
    assert len(want) > 30
    assert set(found) == want, "missing: %s\nunexpected: %s" % (sorted(want - set(found)), sorted(set(found) - want))
    # Each line carries what it is and what to write instead.
    assert any("compile(experimental_run_tf_function=...) -> drop it" in text for text in lines)
    line = next(n for n, text in enumerate(open(EVERYTHING), 1) if "opt.variables()" in text)
    assert "train.py:%d:32: [variables-call] opt.variables() -> opt.variables (a property in Keras 3) (fixable with " \
           "--write)" % line in lines
    assert lines[-1] == "train.py: %d construct(s) to change, %d of them fixable with --write" % (
        len(found), sum(1 for state in found.values() if state == "fixable with --write"))
    assert script.read_text() == open(EVERYTHING).read()  # a report changes nothing


def test_write_rewrites_the_mechanical_ones_and_keeps_reporting_the_rest(tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(EVERYTHING, script)
    _, before = migrate("train.py", cwd=tmp_path)
    manual = sorted(rule for (_, rule), state in findings(before).items() if state == "needs a manual change")
    fixable = [key for key, state in findings(before).items() if state == "fixable with --write"]
    status, lines = migrate("--write", "train.py", cwd=tmp_path)
    assert status == 1, lines  # constructs that need a person are left
    new = script.read_text()
    ast.parse(new)
    assert (tmp_path / "train.py.bak").read_text() == open(EVERYTHING).read()
    after = findings(lines)
    assert sorted(key for key, state in after.items() if state == "fixed") == sorted(fixable)
    assert sorted(rule for (_, rule), state in after.items() if state == "needs a manual change") == manual
    for gone in ("experimental_run_tf_function", ".variables()", "lr=", "optimizers.legacy", "K.set_value",
                 "K.get_value", ".lr", "fit_generator", "workers=", "import horovod", "from horovod",
                 "layers.core", "np_utils", "experimental.preprocessing", "horovod.run("):
        assert gone not in new, gone
    for present in ("import tfring.runner", "import tfring.keras as hvd", "from tfring.keras import callbacks",
                    "import tfring as hvd_tf", "self.model.optimizer.learning_rate.assign(lr * 0.9)",
                    "opt.variables, root_rank=0", "tf.keras.optimizers.SGD(learning_rate=0.01 * hvd.size()",
                    "model.fit(batches(), steps_per_epoch=8, epochs=1,", "tfring.runner.run(train, np=2, use_gloo=",
                    "K.set_session(tf.Session(config=config))", "hvd_tf.BroadcastGlobalVariablesHook(0)",
                    "metrics=[\"accuracy\"])  # expect: compile-args"):
        assert present in new, present
    # A second run finds only what needs a person, at the new lines; --write then changes nothing more.
    status, again = migrate("--write", "train.py", cwd=tmp_path)
    assert status == 1 and set(findings(again).values()) == {"needs a manual change"}
    assert script.read_text() == new and not (tmp_path / "train.py.bak.1").exists()


def test_backup_is_never_overwritten_and_diff_is_a_dry_run(tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(JOB, script)
    (tmp_path / "train.py.bak").write_text("an older backup\n")
    status, lines = migrate("--diff", "train.py", cwd=tmp_path)
    assert status == 1
    assert "-opt = keras.optimizers.legacy.Adam(lr=0.01 * hvd.size())" in lines
    assert "+opt = keras.optimizers.Adam(learning_rate=0.01 * hvd.size())" in lines
    assert script.read_text() == open(JOB).read()
    status, lines = migrate("--write", "train.py", cwd=tmp_path)
    assert status == 0, lines  # everything in it is mechanical
    assert lines[-1].endswith("(original kept in train.py.bak.1); nothing left")
    assert (tmp_path / "train.py.bak").read_text() == "an older backup\n"
    assert (tmp_path / "train.py.bak.1").read_text() == open(JOB).read()


def test_exit_status(tmp_path):
    (tmp_path / "clean.py").write_text("import tfring.keras as hvd\nhvd.init()\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "tf1.py").write_text("import tensorflow.compat.v1 as tf\ns = tf.Session()\n")
    assert migrate("clean.py", cwd=tmp_path) == (0, ["clean.py: nothing to change"])
    status, lines = migrate("broken.py", "clean.py", cwd=tmp_path)
    assert status == 2 and lines[0].startswith("broken.py: error:")
    assert migrate("missing.py", cwd=tmp_path)[0] == 2
    assert migrate("tf1.py", cwd=tmp_path)[0] == 1
    assert migrate("--ignore", "tf1-session", "tf1.py", cwd=tmp_path)[0] == 0
    assert migrate("--write", "tf1.py", cwd=tmp_path)[0] == 1  # nothing mechanical: reported, file untouched
    assert not (tmp_path / "tf1.py.bak").exists()


def test_the_tool_imports_no_framework(tmp_path):
    shutil.copy(EVERYTHING, tmp_path / "train.py")
    code = ("import sys; from tfring.migrate.__main__ import main; status = main(['--write', 'train.py'], "
            "out=open('report.txt', 'w')); bad = sorted(m for m in %r if m in sys.modules); "
            "assert not bad, bad; print('ok', status)" % (FRAMEWORKS,))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.stdout.strip() == "ok 1", proc.stdout


def _fake_horovod(root):
    """A `horovod` package that is tfring under Horovod's import paths, to run the script as it was written."""
    pkg = root / "horovod" / "tensorflow" / "keras"
    pkg.mkdir(parents=True)
    (root / "horovod" / "__init__.py").write_text("")
    (root / "horovod" / "tensorflow" / "__init__.py").write_text("from tfring.tensorflow import *\n")
    (pkg / "__init__.py").write_text("from tfring.keras import *\nfrom tfring.keras import callbacks\n")


@pytest.mark.slow  # launches ranks
def test_keras2_horovod_script_trains_on_2_ranks_after_write(tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(JOB, script)
    env = rank_env()
    tested = os.path.dirname(os.path.dirname(os.path.abspath(__import__("tfring").__file__)))
    env["PYTHONPATH"] = os.pathsep.join([tested, str(tmp_path / "shim")] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    # As written, on Keras 3 (horovod resolving to tfring): it fails at the first Keras 2 construct.
    _fake_horovod(tmp_path / "shim")
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode != 0 and "not supported in Keras 3" in proc.stdout, proc.stdout[-3000:]
    status, lines = migrate("--write", "train.py", cwd=tmp_path)
    assert status == 0, lines
    assert len(findings(lines)) == 12
    shutil.rmtree(tmp_path / "shim")  # the rewritten script imports tfring itself
    proc = subprocess.run([sys.executable, "-m", "tfring.runner", "-np", "2", "python", "train.py"], cwd=tmp_path,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:]
    results = re.findall(r"MIGRATED_JOB rank=(\d) size=2 lr=([\d.]+) checksum=([\d.]+)", proc.stdout)
    assert sorted(r[0] for r in results) == ["0", "1"], proc.stdout[-5000:]
    # lr 0.01 * size, halved by the rewritten K.set_value callback after the epoch; identical weights on both ranks
    # (broadcast at the start, averaged gradients since).
    assert {r[1] for r in results} == {"0.010000"}
    assert len({r[2] for r in results}) == 1, results
