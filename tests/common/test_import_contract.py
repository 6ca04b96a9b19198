"""The import layers (docs/architecture.md, "Layers"), checked on every module's imports, those inside functions
too: no import cycle anywhere in the package; tfring.common imports no framework and no other tfring package; a
binding imports tfring.common and its own framework only; the launcher imports tfring.common only. There is no
exceptions list. Then every module imports first, alone, in a fresh process (a cycle that Python resolves in one
order fails in another), and `import tfring.torch` / the launcher load no TensorFlow."""
import ast
import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "tfring")


def _tested_path():
    """Where the tfring under test lies (the installed package, or the tree named by PYTHONPATH): the fresh
    processes below import that one, never the source tree by accident through their working directory."""
    import tfring
    return os.path.dirname(os.path.dirname(os.path.abspath(tfring.__file__)))
FRAMEWORKS = {"tensorflow", "tf_keras", "keras", "torch", "torchvision", "mxnet", "jax", "jaxlib", "flax", "optax",
              "pyspark", "ray", "lightning", "pytorch_lightning"}
# layer -> (tfring layers it may import besides itself, frameworks it may import)
RULES = {
    "root": ({"common"}, set()),  # `import tfring`: the TF API loads on first use (importlib), not on import
    "common": (set(), set()),
    "tensorflow": ({"common"}, {"tensorflow", "keras", "tf_keras"}),  # TF's Keras is part of its framework
    "torch": ({"common"}, {"torch"}),
    "mxnet": ({"common"}, {"mxnet"}),
    "jax": ({"common"}, {"jax", "jaxlib", "optax"}),  # optax: the DistributedOptimizer is an optax transformation
    # Keras 3 (and tf_keras) on the active backend's binding.
    "keras": ({"common", "tensorflow", "torch", "jax"}, {"keras", "tf_keras", "tensorflow", "torch", "jax"}),
    "runner": ({"common"}, set()),
    # Engines start jobs through the launcher; their estimators train with the Keras layer or tfring.torch.
    "spark": ({"runner", "common", "keras", "tensorflow", "torch"},
              {"pyspark", "keras", "tensorflow", "torch", "lightning", "pytorch_lightning"}),
    "ray": ({"runner", "common"}, {"ray"}),
    # python -m tfring.migrate: reads scripts with ast, imports no framework and no binding.
    "migrate": (set(), set()),
}
LAYER_OF_PACKAGE = {"common": "common", "tensorflow": "tensorflow", "torch": "torch", "mxnet": "mxnet", "jax": "jax",
                    "keras": "keras", "callbacks": "keras", "runner": "runner", "spark": "spark", "ray": "ray"}


def modules():
    """{dotted module name: path} of every .py file in tfring/."""
    found = {}
    for directory, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                dotted = os.path.relpath(path[:-3], ROOT).replace(os.sep, ".")
                found[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return found


MODULES = modules()


def layer(module):
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "version":
        return "root" if len(parts) == 1 else "common"  # tfring.version: a constant, importable by anyone
    return LAYER_OF_PACKAGE.get(parts[1], parts[1])


def _owner(name):
    """The module a dotted import name refers to (a package's attribute resolves to the package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports(module):
    """(tfring modules, third-party top-level names) that `module` imports anywhere in its body."""
    path = MODULES[module]
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    internal, external = set(), set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tfring":
                    internal.add(_owner(alias.name))
                else:
                    external.add(alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            if base.split(".")[0] != "tfring":
                external.add(base.split(".")[0])
                continue
            for alias in node.names:
                full = base + "." + alias.name
                if full in MODULES:
                    internal.add(full)
                elif not alias.name.startswith("_tfring"):  # a compiled extension is a leaf
                    internal.add(_owner(base))
    internal.discard(module)
    return internal, external


GRAPH = {m: imports(m) for m in MODULES}


def test_the_scan_sees_the_package():
    # Guards the check itself: it must find the layers and the imports it judges.
    assert {"tfring.common.basics", "tfring.tensorflow.mpi_ops", "tfring.torch.mpi_ops",
            "tfring.runner"} <= set(MODULES)
    assert "tfring.common.basics" in GRAPH["tfring.tensorflow"][0]
    assert "tensorflow" in GRAPH["tfring.tensorflow.mpi_ops"][1]
    assert "torch" in GRAPH["tfring.torch._handles"][1]


def find_cycles(graph):
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_find_cycles_finds_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = find_cycles({m: internal for m, (internal, _) in GRAPH.items()})
    assert not cycles, "import cycles (each a set of modules that import each other):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_layer_rules():
    broken = []
    for module, (internal, external) in sorted(GRAPH.items()):
        own = layer(module)
        allowed_layers, allowed_frameworks = RULES[own]
        for target in sorted(internal):
            other = layer(target)
            if other != own and other not in allowed_layers and target != "tfring.version":
                broken.append("%s (%s) imports %s (%s)" % (module, own, target, other))
        for name in sorted(external & FRAMEWORKS - allowed_frameworks):
            broken.append("%s (%s) imports the framework %s" % (module, own, name))
    assert not broken, "layer rule broken (docs/architecture.md, Layers):\n" + "\n".join(broken)


def _installed(name):
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.origin is not None  # a namespace directory is not the package


def _frameworks_needed(module, seen=None):
    """The frameworks `module`, its parent packages and everything they import need."""
    seen = set() if seen is None else seen
    seen.add(module)
    internal, external = GRAPH[module]
    parents = {module.rsplit(".", i)[0] for i in range(1, module.count(".") + 1)}
    needed = external & FRAMEWORKS
    for target in (internal | parents) - seen:
        needed |= _frameworks_needed(target, seen)
    return needed


def _importable_alone():
    """Modules whose frameworks are installed here (a mxnet module needs mxnet, ...); `__main__` modules run."""
    return sorted(m for m in GRAPH if not m.endswith(".__main__")
                  and all(_installed(name) for name in _frameworks_needed(m)))


# One child per module, forked from a process that imported the frameworks but no tfring module: each child then
# imports its module first, alone, in a second or less (a fresh interpreter would pay TensorFlow's import each time).
_FORK_CHECK = r"""
import importlib, json, os, sys
for framework in sys.argv[2:]:
    importlib.import_module(framework)
failed = {}
for module in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(module)
            message = ""
        except BaseException as e:
            message = "%s: %s" % (type(e).__name__, e)
        os.write(write, message.encode()[:4000])
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        message = f.read()
    _, status = os.waitpid(pid, 0)
    if message or status:
        failed[module] = message or "exit status %d" % status
print(json.dumps(failed))
"""


def test_every_module_imports_first_alone():
    import json
    targets = _importable_alone()
    assert "tfring.tensorflow.mpi_ops" in targets or not _installed("tensorflow"), targets
    preload = [f for f in ("tensorflow", "keras", "torch") if _installed(f)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=os.pathsep.join(
        [_tested_path()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-P", "-c", _FORK_CHECK, json.dumps(targets)] + preload, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900, cwd="/")
    assert proc.returncode == 0, proc.stderr[-5000:]
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not failed, "modules that fail when imported first:\n" + "\n".join(
        "%s: %s" % item for item in sorted(failed.items()))


def _fresh(code, **env):
    environ = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env)
    environ["PYTHONPATH"] = os.pathsep.join([_tested_path()] + [p for p in environ.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    return subprocess.run([sys.executable, "-P", "-c", code], env=environ, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300, cwd="/")


NO_TF = "import sys; {}; bad = sorted(m for m in ('tensorflow', 'keras', 'tf_keras') if m in sys.modules); " \
        "assert not bad, bad; print('ok')"


@pytest.mark.skipif(not _installed("torch"), reason="torch is not installed")
def test_torch_binding_loads_no_tensorflow():
    proc = _fresh(NO_TF.format("import tfring.torch as hvd; hvd.init(); hvd.allreduce(__import__('torch').ones(2)); "
                               "hvd.elastic.TorchState"))
    assert proc.stdout.strip().endswith("ok"), proc.stdout[-3000:]


@pytest.mark.skipif(not _installed("jax"), reason="jax is not installed")
def test_jax_binding_loads_no_tensorflow_and_no_torch():
    proc = _fresh(NO_TF.format("import tfring.jax as hvd; hvd.init(); hvd.allreduce(__import__('jax').numpy.ones(2)); "
                               "assert 'torch' not in sys.modules"))
    assert proc.stdout.strip().endswith("ok"), proc.stdout[-3000:]


@pytest.mark.parametrize("backend,absent", [("jax", ("tensorflow", "torch")), ("torch", ("tensorflow",))])
def test_keras_on_jax_or_torch_loads_only_that_framework(backend, absent):
    # (Keras itself imports jax on its torch backend when jax is installed: not ours to forbid.)
    if not (_installed(backend) and _installed("keras")):
        pytest.skip("%s or keras is not installed" % backend)
    code = ("import sys; import tfring.keras as hvd; import tfring.keras.callbacks; hvd.init(); "
            "m = hvd.DistributedOptimizer(__import__('keras').optimizers.SGD(0.1)); "
            "bad = sorted(f for f in %r if f in sys.modules); assert not bad, bad; print('ok')" % (absent,))
    proc = _fresh(code, KERAS_BACKEND=backend, TF_USE_LEGACY_KERAS="0")
    assert proc.stdout.strip().endswith("ok"), proc.stdout[-3000:]


def test_package_root_launcher_and_common_load_no_framework():
    code = "import sys; import tfring, tfring.common.basics, tfring.common.elastic.run, tfring.runner; " \
           "from tfring.runner import launch; bad = sorted(m for m in %r if m in sys.modules); assert not bad, bad; " \
           "print('ok')" % sorted(FRAMEWORKS)
    proc = _fresh(code)
    assert proc.stdout.strip().endswith("ok"), proc.stdout[-3000:]


@pytest.mark.skipif(not _installed("tf_keras"), reason="tf_keras is not installed")
def test_tf_keras_sync_batch_norm_imports_first():
    # Was a partially-initialised-module error (sync_batch_norm <-> its tf_keras twin).
    proc = _fresh("import tfring.tensorflow.tf_keras.sync_batch_norm as m; import tfring.keras as hvd; "
                  "assert hvd.SyncBatchNormalization is m.SyncBatchNormalization; print('ok')",
                  TF_USE_LEGACY_KERAS="1")
    assert proc.stdout.strip().endswith("ok"), proc.stdout[-3000:]


def test_every_package_directory_has_an_init():
    # setup.py's find_packages leaves a directory without __init__.py out of the installed package (a namespace
    # package imports from a source tree, then fails after `pip install`).
    missing = [os.path.relpath(d, ROOT) for d, _, files in os.walk(PACKAGE)
               if any(f.endswith(".py") for f in files) and "__init__.py" not in files]
    assert not missing, missing


@pytest.mark.parametrize("binding", ["tensorflow", "torch", "mxnet", "jax"])
def test_every_binding_has_one_module_shape(binding):
    # docs/architecture.md "Layers": a reader who knows one binding finds the same collective in the same file of
    # the others, and a binding's siblings reach its door to the core through _handles' public names only.
    shape = {"_handles", "_reduce", "_gather", "_reducescatter", "mpi_ops", "functions", "compression", "optimizer"}
    if binding == "tensorflow":
        shape -= {"optimizer"}  # compat_optimizer (TF1's and tf_keras' wrapper); Keras 3's is tfring.keras'
    present = {f[:-3] for f in os.listdir(os.path.join(PACKAGE, binding)) if f.endswith(".py")}
    assert shape <= present, sorted(shape - present)
    collectives = {"_reduce": ["allreduce", "grouped_allreduce"], "_gather": ["allgather", "broadcast", "alltoall"],
                   "_reducescatter": ["reducescatter", "grouped_reducescatter"]}
    for module, functions in collectives.items():
        tree = ast.parse(open(os.path.join(PACKAGE, binding, module + ".py")).read())
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert set(functions) <= defined, (binding, module, sorted(set(functions) - defined))
    for module in present - {"_handles"}:
        tree = ast.parse(open(os.path.join(PACKAGE, binding, module + ".py")).read())
        private = [(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                   and (n.module or "").startswith("tfring.") for a in n.names
                   if a.name.startswith("_") and not a.name.startswith("__")
                   and not _is_module(n.module + "." + a.name)]  # `from tfring.x import _m`: a module is fine
        assert not private, (binding, module, private)


def _is_module(dotted):
    path = os.path.join(ROOT, *dotted.split("."))
    return os.path.exists(path + ".py") or os.path.isdir(path)
