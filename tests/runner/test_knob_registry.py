"""The knob table is the one declaration of every TFRING_* setting (#42): tfringrun's knob flags, their --help lines,
config-file keys and ranges, the Python-side readers and docs/knobs.md are built from the core's rows, and no other
table in the package names a knob. In-process: the launcher's parser and checks, no ranks."""
import ast
import glob
import os
import re

import pytest

from conftest import ROOT
from tfring.common import knobs, launch_env
from tfring.runner import checks, config
from tfring.runner.flags import UsageError, build_parser

CONTRACT = {v for k, v in vars(launch_env).items() if k.isupper() and isinstance(v, str) and v.startswith("TFRING_")}
NAMES = {k.name for k in knobs.table()}


def _sources():
    for path in glob.glob(os.path.join(ROOT, "tfring", "**", "*.py"), recursive=True):
        with open(path) as f:
            yield os.path.relpath(path, ROOT), f.read()


def test_docs_knobs_md_is_the_table():
    with open(os.path.join(ROOT, "docs", "knobs.md")) as f:
        assert f.read() == knobs.markdown(), "docs/knobs.md is stale: python -P -m tfring.common.knobs > docs/knobs.md"


def test_every_tfring_variable_the_package_names_is_a_knob_or_the_launch_contract():
    assert CONTRACT & NAMES == {"TFRING_ELASTIC_TIMEOUT"}  # the one knob the launcher also passes to the ranks
    build_time = {"TFRING_GPU_OPERATIONS"}  # read by setup.py (docs/gpu.md), named in rebuild hints
    prefixes = {"TFRING_SLOT", "TFRING_ELASTIC"}  # startswith() filters over the contract
    unknown = set()
    for path, text in _sources():
        for name in re.findall(r"(?<![A-Za-z0-9_])TFRING_[A-Z0-9_]*[A-Z0-9]", text):
            if name not in NAMES | CONTRACT | build_time | prefixes:
                unknown.add((path, name))
    assert not unknown, "declare these in the knob table (tfring/cc/common/env.cc): %s" % sorted(unknown)


def test_no_python_table_lists_a_knob_name():
    """A knob name inside a dict, list, tuple or set literal is a second declaration (the launcher's old flag map,
    a (TFRING_X, HOROVOD_X) pair to read in order); readers go through knobs.value()."""
    found = []
    for path, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Dict, ast.List, ast.Tuple, ast.Set)):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Constant) and sub.value in NAMES | {
                            "HOROVOD_" + n[len("TFRING_"):] for n in NAMES}:
                        found.append((path, sub.lineno, sub.value))
    assert not found, found


def test_every_launcher_knob_has_its_flag_help_range_and_config_key():
    parser = build_parser()
    helps = parser.format_help()
    flags = {o: a for a in parser._actions for o in a.option_strings}
    rows = knobs.launcher_knobs()
    assert len(rows) >= 19
    for k in rows:
        spellings = k.flag.split("|")
        assert all(s in flags for s in spellings), k
        assert flags[spellings[0]].dest == knobs.dest(k) and k.name in helps, k
        if k.config:  # horovodrun's YAML key sets the same dest
            section, key = k.config.lstrip("!").split(".")
            assert config.SECTIONS[section][key][0] == knobs.dest(k), k
            assert ((section, key) in config.INVERTED) == k.config.startswith("!"), k


@pytest.mark.parametrize("argv,env", [
    (["--fusion-threshold-mb", "1.5"], {"TFRING_FUSION_THRESHOLD": str(3 << 19)}),  # MB -> bytes, the table's scale
    (["--no-straggler-check"], {"TFRING_STRAGGLER_CHECK": "0"}),  # the first of a pair flips the default
    (["--straggler-check"], {"TFRING_STRAGGLER_CHECK": "1"}),
    (["--timeline-rank0-only"], {"TFRING_TIMELINE_RANK0_ONLY": "1"}),
    (["--log-level", "FATAL"], {"TFRING_LOG_LEVEL": "error"}),
    (["--autotune-samples-per-candidate", "5"], {"TFRING_AUTOTUNE_SAMPLES_PER_CANDIDATE": "5"}),
])
def test_a_knob_flag_sets_its_row_for_the_ranks(argv, env):
    args = build_parser().parse_args(argv + ["python", "x.py"])
    checks.check(args)
    assert checks.knob_env(args) == env


@pytest.mark.parametrize("argv,message", [
    (["--autotune-samples-per-candidate", "0"], "--autotune-samples-per-candidate: 0 must be in [1, 1000000]"),
    (["--autotune-sample-seconds", "0.001"], "--autotune-sample-seconds: 0.001 must be in [0.01, 1000000]"),
    (["--cycle-time-ms", "2e6"], "--cycle-time-ms: 2000000.0 must be in [0, 1000000]"),
    (["--fusion-threshold-mb", "-1"], "--fusion-threshold-mb: -1.0 must be in [0, "),
    (["--stall-check-warning-time-seconds", "-2"], "--stall-check-warning-time-seconds: -2.0 must be >= 0"),
])
def test_a_knob_flag_outside_the_tables_range_is_refused_naming_it(argv, message):
    args = build_parser().parse_args(argv + ["python", "x.py"])
    with pytest.raises(UsageError) as e:
        checks.check(args)
    assert message in str(e.value)


def test_python_side_readers_take_the_tables_default_and_the_horovod_name(monkeypatch):
    from tfring.runner import mpirun
    from tfring.spark.runner import start_timeout_of
    env = {}
    assert start_timeout_of(None, env) == float(knobs.row("TFRING_SPARK_START_TIMEOUT").default) == 600
    assert start_timeout_of(None, {"HOROVOD_SPARK_START_TIMEOUT": "7"}) == 7
    args = build_parser().parse_args(["python", "x.py"])
    assert mpirun.elastic_timeout(args, env) == 600
    assert mpirun.elastic_timeout(args, {"HOROVOD_ELASTIC_TIMEOUT": "9", "TFRING_ELASTIC_TIMEOUT": "8"}) == 8
    assert mpirun.start_timeout(args, env, remote=False) == 0 and mpirun.start_timeout(args, env, remote=True) == 30
    with pytest.raises(UsageError, match="HOROVOD_START_TIMEOUT='soon'"):
        mpirun.start_timeout(args, {"HOROVOD_START_TIMEOUT": "soon"}, remote=False)
    assert knobs.value("TFRING_OVERLAP_GRADIENTS", {}) == ("auto", None)
