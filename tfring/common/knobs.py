"""The knob table: every TFRING_* setting, declared once, in the core (tfring/cc/common/env.cc), with its type,
default, range and meaning, and for the launcher its flag, --help line and horovodrun config-file key. Each is also
read under its HOROVOD_* name. What is built from it: tfringrun's knob flags (runner/flags.py), their config-file
keys (runner/config.py), range checks and the environment passed to the ranks (runner/checks.py), the Python-side
readers (`value`) and the docs' table (docs/knobs.md, `python -m tfring.common.knobs`). Imports no framework;
reading it loads the core library without initializing anything."""
import collections
import ctypes
import functools
import importlib
import os
import sys

from tfring.common import library

Knob = collections.namedtuple("Knob", "name type default doc min max flag group flag_help config flag_scale reader")
Knob.__doc__ = """One row. type: int, double, bool, string or level; reader: "core" (the C++ runtime reads it) or
"python" (the launcher, the Spark driver or a binding does); flag: "--x", or "--on|--off" for a boolean, where the
first flips the default; config: "section.key" of horovodrun's YAML layout ("!" first: the key means the opposite)."""


def _core_handle():
    """The core's ctypes handle for reading its tables: the one a binding loaded, else the library opened without
    preparing MPI for init (the launcher must not change its own environment, which the ranks inherit)."""
    if library.loaded() is not None:
        return library.loaded()
    path = os.path.join(library.PACKAGE_DIR, library.CORE_LIBRARY)
    if not os.path.exists(path):
        path = _installed_core() or path
    if not os.path.exists(path):
        if library.find_extension("tensorflow", "_tfring*.so"):
            # A Bazel build: the core lives in TensorFlow's op library, which the TF binding loads (and adopts).
            importlib.import_module("tfring.tensorflow")
            if library.loaded() is not None:
                return library.loaded()
        return library.core()  # raises the ImportError that says how to build it
    library.load_wheel_mpi()  # OPAL_PREFIX is not set here: the launcher's environment goes to the ranks
    c = ctypes.CDLL(path)
    c.tfring_knob_table.restype = ctypes.c_char_p
    return c


def _installed_core():
    """The installed tfring distribution's core, where this tfring is a source tree without a build: a launcher or a
    Spark/Ray worker started in a checkout imports the tree's pure-Python tfring/ (the working directory comes first
    on its path) while tfring is installed; the table is read from the installed build then."""
    from importlib import metadata
    for dist in metadata.distributions(name="tfring"):  # a checkout's own egg-info may come first
        found = str(dist.locate_file("tfring/" + library.CORE_LIBRARY))
        if os.path.exists(found):
            return found
    return None


@functools.lru_cache(maxsize=None)
def table():
    """Every knob, in the core's order.

    Returns:
        tuple: of Knob rows.
    """
    rows = []
    for line in _core_handle().tfring_knob_table().decode().splitlines():
        f = line.split("\x1f")
        rows.append(Knob(*f[:4], float(f[4]), float(f[5]), *f[6:10], float(f[10]), f[11]))
    return tuple(rows)


def row(name):
    """The row of `name` (a TFRING_* name).

    Raises:
        KeyError: no such knob.
    """
    for k in table():
        if k.name == name:
            return k
    raise KeyError("no knob named %r (tfring.knob_table() lists them)" % (name,))


def value(name, environ=None):
    """The raw setting: $TFRING_<X>, else $HOROVOD_<X>, else the table's default (as the core reads it).

    Args:
        name: a TFRING_* name of the table.
        environ: the environment (default os.environ).

    Returns:
        tuple: (value string, the variable it came from, or None for the default).
    """
    env = os.environ if environ is None else environ
    default = row(name).default
    for var in (name, "HOROVOD_" + name[len("TFRING_"):]):
        if env.get(var):
            return env[var], var
    return default, None


def stall_shutdown_seconds(environ=None):
    """The deadline the core gives a stalled wait, TFRING_STALL_SHUTDOWN_TIME_SECONDS (0 when it waits forever:
    the value is 0, or TFRING_STALL_CHECK_DISABLE is on).

    Raises:
        ValueError: a value that is not a number, naming its variable.
    """
    name = "TFRING_STALL_SHUTDOWN_TIME_SECONDS"
    raw, var = value(name, environ)
    try:
        if raw != raw.strip():
            raise ValueError(raw)  # the core takes none either
        seconds = float(raw)
    except ValueError:
        raise ValueError("%s=%r: expected seconds" % (var or name, raw)) from None
    off = value("TFRING_STALL_CHECK_DISABLE", environ)[0].strip().lower() in ("1", "true", "yes", "on")
    return 0.0 if off else max(seconds, 0.0)


def launcher_knobs():
    """The rows tfringrun has a flag for, in the core's order."""
    return [k for k in table() if k.flag]


def flag_type(knob):
    """The Python type of a knob flag's value: bool for an on/off pair, float for a scaled number (the fusion
    threshold's MB), else the row's int, float or str (a "level" row: str, one of the log levels)."""
    if "|" in knob.flag:
        return bool
    if knob.flag_scale != 1:
        return float
    return {"int": int, "double": float}.get(knob.type, str)


def dest(knob):
    """The argparse dest of a knob's flag: its (first) long flag, e.g. "--no-stall-check" -> "no_stall_check"."""
    return knob.flag.split("|")[0][2:].replace("-", "_")


def markdown():
    """The docs' knob table (docs/knobs.md): every row, as Markdown."""
    def cell(text):
        return (text or "").replace("|", "\\|")
    lines = ["# Settings (`TFRING_*` environment variables)", "",
             "Generated from the knob table in `tfring/cc/common/env.cc` by `python -m tfring.common.knobs` (a test "
             "checks that this file matches it). Each is also read as `HOROVOD_*` with the same suffix; when both "
             "are set, `TFRING_*` wins. `tfring.knob_table()` lists them at run time.", "",
             "| variable | default | tfringrun flag / config key | meaning |", "| --- | --- | --- | --- |"]
    for k in table():
        launcher = " / ".join(x for x in ("`%s`" % k.flag.replace("|", "` `") if k.flag else "",
                                          "`%s`" % k.config.lstrip("!") if k.config else "") if x)
        reader = "" if k.reader == "core" else " (read by tfring's Python side)"
        lines.append("| `%s` | %s | %s | %s%s |" % (k.name, cell(k.default) or "(none)", launcher, cell(k.doc), reader))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
