"""Horovod -> tfring: import paths (mechanical), and the Horovod names and modules tfring does not have (reported)."""
import ast

from tfring.migrate.core import Edit

# Horovod module -> the tfring module with the same names. `horovod` itself is handled apart (only `horovod.run`).
MODULES = {
    "horovod.tensorflow": "tfring",
    "horovod.tensorflow.keras": "tfring.keras",
    "horovod.tensorflow.keras.callbacks": "tfring.keras.callbacks",
    "horovod.tensorflow.keras.elastic": "tfring.keras.elastic",
    "horovod.tensorflow.elastic": "tfring.tensorflow.elastic",
    "horovod.tensorflow.compression": "tfring.tensorflow.compression",
    "horovod.tensorflow.functions": "tfring.tensorflow.functions",
    "horovod.tensorflow.mpi_ops": "tfring.tensorflow",
    "horovod.tensorflow.sync_batch_norm": "tfring.tensorflow.sync_batch_norm",
    "horovod.keras": "tfring.keras",
    "horovod.keras.callbacks": "tfring.keras.callbacks",
    "horovod.keras.elastic": "tfring.keras.elastic",
    "horovod.torch": "tfring.torch",
    "horovod.torch.compression": "tfring.torch.compression",
    "horovod.torch.elastic": "tfring.torch.elastic",
    "horovod.torch.elastic.sampler": "tfring.torch.elastic.sampler",
    "horovod.torch.elastic.state": "tfring.torch.elastic.state",
    "horovod.torch.functions": "tfring.torch.functions",
    "horovod.torch.mpi_ops": "tfring.torch.mpi_ops",
    "horovod.torch.optimizer": "tfring.torch.optimizer",
    "horovod.torch.sync_batch_norm": "tfring.torch.sync_batch_norm",
    "horovod.mxnet": "tfring.mxnet",
    "horovod.mxnet.compression": "tfring.mxnet.compression",
    "horovod.mxnet.functions": "tfring.mxnet.functions",
    "horovod.mxnet.mpi_ops": "tfring.mxnet.mpi_ops",
    "horovod.spark": "tfring.spark",
    "horovod.spark.keras": "tfring.spark.keras",
    "horovod.spark.torch": "tfring.spark.torch",
    "horovod.spark.lightning": "tfring.spark.lightning",
    "horovod.spark.common": "tfring.spark.common",
    "horovod.spark.common.store": "tfring.spark.common.store",
    "horovod.spark.common.backend": "tfring.spark.common.backend",
    "horovod.ray": "tfring.ray",
    "horovod.ray.elastic": "tfring.ray.elastic",
    "horovod.ray.ray_logger": "tfring.ray.ray_logger",
    "horovod.runner": "tfring.runner",
    "horovod.common.exceptions": "tfring.common.errors",
}
# `from horovod import X`: the tfring spelling of each X.
TOP_LEVEL = {"run": "tfring.runner", "tensorflow": "tfring", "keras": "tfring", "torch": "tfring",
             "mxnet": "tfring", "spark": "tfring", "ray": "tfring", "runner": "tfring"}

# Horovod names whose module tfring has, but not the name (tests/migrate checks each is absent from tfring).
MISSING = {
    "horovod.tensorflow.BroadcastGlobalVariablesHook":
        "a TF1 SessionRunHook: in TF2 broadcast with hvd.broadcast_variables(model.variables, root_rank=0) after "
        "the first step, or hvd.callbacks.BroadcastGlobalVariablesCallback(0) in Keras",
    "horovod.tensorflow.gpu_available": "not in tfring: ask TensorFlow (tf.config.list_physical_devices('GPU'))",
    "horovod.tensorflow.check_extension": "Horovod-internal; not in tfring (tfringrun --check-build lists builds)",
    "horovod.torch.check_extension": "Horovod-internal; not in tfring (tfringrun --check-build lists builds)",
    "horovod.spark.common.store.HDFSStore": "HDFS stores are not built: a LocalStore on a shared filesystem",
    "horovod.spark.common.store.DBFSLocalStore": "DBFS stores are not built: a LocalStore on a shared filesystem",
    "horovod.spark.common.store.FilesystemStore": "use tfring.spark.common.store.LocalStore (local paths only)",
    "horovod.common.exceptions.HorovodVersionMismatchError": "not in tfring (nothing to mismatch)",
}
# Horovod modules tfring does not have: what to use instead.
ABSENT = {
    "horovod.tensorflow.data": "tf.data service helpers are not built: distribute the input with "
                               "dataset.shard(hvd.size(), hvd.rank())",
    "horovod.spark.tensorflow": "tf.data service on Spark is not built",
    "horovod.data": "Horovod's data loaders are not built: the framework's own loader, sharded by rank",
    "horovod.ray.elastic_v2": "Horovod's second elastic Ray API (ElasticAdapter) is not built: "
                              "tfring.ray.ElasticRayExecutor (horovod.ray.elastic's API)",
    "horovod.tensorflow.gradient_aggregation": "DistributedOptimizer(backward_passes_per_step=k) aggregates",
    "horovod.tensorflow.gradient_aggregation_eager": "DistributedOptimizer(backward_passes_per_step=k) aggregates",
}
# tfring.runner.run's arguments (horovod.run has more).
RUN_ARGS = {"args", "kwargs", "np", "hosts", "env", "verbose", "mpi_args"}
# horovod.run arguments that can go when they ask for what tfring does anyway.
RUN_HARMLESS = {"use_gloo": False, "use_mpi": True}


def target(module):
    """The tfring module for a Horovod module (None when tfring has none)."""
    if module == "horovod":
        return "tfring.runner"
    return MODULES.get(module)


def _absent(module):
    for name, why in ABSENT.items():
        if module == name or module.startswith(name + "."):
            return why
    return None


def _from_import(ctx, node):
    module = node.module
    head = ctx.source[ctx.start(node):ctx.end(node)]
    i = head.find(module)
    if module == "horovod":
        new = {TOP_LEVEL.get(a.name) for a in node.names}
        if None in new or len(new) != 1:
            yield ctx.finding("horovod-import", node, "from horovod import %s" % ", ".join(a.name for a in node.names),
                              "tfring has: %s" % ", ".join("from %s import %s" % (v, k) for k, v in TOP_LEVEL.items()))
            return
        new = new.pop()
    else:
        new = MODULES.get(module)
    if new is None:
        yield ctx.finding("horovod-import", node, "from %s import ..." % module,
                          _absent(module) or "tfring has no %s (README, docs/migrating.md)" % module)
        return
    if i < 0:
        yield ctx.finding("horovod-import", node, "from %s import ..." % module, "from %s import ..." % new)
        return
    start = ctx.start(node) + i
    yield ctx.finding("horovod-import", node, "from %s import ..." % module, "from %s import ..." % new,
                      [Edit(start, start + len(module), new)])


def _import(ctx, node, uses_other_than_run):
    for a in node.names:
        if a.name != "horovod" and not a.name.startswith("horovod."):
            continue
        new = target(a.name)
        what = "import %s%s" % (a.name, " as " + a.asname if a.asname else "")
        if new is None:
            yield ctx.finding("horovod-import", a, what,
                              _absent(a.name) or "tfring has no %s (README, docs/migrating.md)" % a.name)
        elif a.name == "horovod" and a.asname in uses_other_than_run:
            yield ctx.finding("horovod-import", a, what, "import tfring.runner (for run) and the binding you use")
        else:
            text = new + (" as " + a.asname if a.asname else "")
            yield ctx.finding("horovod-import", a, what, "import " + text, [ctx.replace(a, text)])


def _chains(ctx):
    """`horovod.a.b...` expressions rooted at a plain `import horovod...` (no alias), outermost only."""
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Name) and node.id == "horovod" and ctx.aliases.get("horovod") == "horovod":
            chain = node
            while isinstance(ctx.parents.get(chain), ast.Attribute):
                chain = ctx.parents[chain]
            yield chain


def _rewrite_chain(ctx, chain):
    """`horovod.tensorflow.keras.X` -> `tfring.keras.X`, on the longest prefix this file imports."""
    nodes = []
    node = chain
    while isinstance(node, ast.Attribute):
        nodes.append(node)
        node = node.value
    nodes.append(node)
    for prefix in nodes:  # longest first
        name = ctx.qualname(prefix)
        if name in ctx.imported and name in MODULES:
            return ctx.finding("horovod-import", prefix, name, MODULES[name], [ctx.replace(prefix, MODULES[name])])
        if name == "horovod.run" or name == "horovod.runner":
            new = "tfring.runner" + name[len("horovod.runner"):] if name == "horovod.runner" else "tfring.runner.run"
            return ctx.finding("horovod-import", prefix, name, new, [ctx.replace(prefix, new)])
    if isinstance(chain, ast.Attribute):
        name = ctx.qualname(chain)
        return ctx.finding("horovod-import", chain, name, _absent(name) or "no tfring spelling: import the module")
    return None


def rule_imports(ctx):
    bare_uses = set()  # aliases of `import horovod as X` used for more than X.run
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr != "run" \
                and ctx.aliases.get(node.value.id) == "horovod" and node.value.id != "horovod":
            bare_uses.add(node.value.id)
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Import):
            for f in _import(ctx, node, bare_uses):
                yield f
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and \
                (node.module == "horovod" or node.module.startswith("horovod.")):
            for f in _from_import(ctx, node):
                yield f
    for chain in _chains(ctx):
        f = _rewrite_chain(ctx, chain)
        if f is not None:
            yield f


def tfring_name(name):
    """The tfring spelling of a Horovod name (`horovod.tensorflow.keras.X` -> `tfring.X`), tfring names unchanged;
    the TensorFlow family (`tfring`, `tfring.tensorflow`, `tfring.keras`) is spelled `tfring.X`."""
    if name == "horovod" or name.startswith("horovod."):
        parts = name.split(".")
        for i in range(len(parts), 1, -1):
            module = ".".join(parts[:i])
            if module in MODULES:
                name = ".".join([MODULES[module]] + parts[i:])
                break
    for family in ("tfring.tensorflow.", "tfring.keras."):
        if name.startswith(family) and name.count(".") == 2:
            return "tfring." + name[len(family):]
    return name


_MISSING = {tfring_name(k): (k, v) for k, v in MISSING.items()}


def rule_missing_names(ctx):
    """Horovod names tfring lacks (`hvd.BroadcastGlobalVariablesHook`, ...), and horovod.run arguments."""
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                hit = _MISSING.get(tfring_name(node.module + "." + a.name))
                if hit:
                    yield ctx.finding("horovod-missing", a, hit[0], hit[1])
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            name = ctx.qualname(node)
            hit = name and name.startswith(("horovod.", "tfring")) and _MISSING.get(tfring_name(name))
            if hit:
                yield ctx.finding("horovod-missing", node, hit[0], hit[1])
        elif isinstance(node, ast.Call) and ctx.qualname(node.func) in RUNS:
            for f in _run_args(ctx, node):
                yield f


RUNS = ("horovod.run", "horovod.runner.run", "tfring.runner.run", "tfring.runner.api.run")


def _run_args(ctx, call):
    harmless = []
    for kw in call.keywords:
        if kw.arg is None or kw.arg in RUN_ARGS:
            continue
        value = RUN_HARMLESS.get(kw.arg, "no")
        if isinstance(kw.value, ast.Constant) and kw.value.value is value:
            harmless.append(kw)
        else:
            yield ctx.finding("horovod-run-args", kw, "%s(%s=...)" % (ctx.text(call.func), kw.arg),
                              "tfring.runner.run takes %s only (MPI only; elastic runs: tfringrun --min-np)"
                              % ", ".join(sorted(RUN_ARGS)))
    if harmless:
        yield ctx.finding("horovod-run-args", harmless[0], "%s(%s)" % (ctx.text(call.func), ", ".join(
            ctx.text(kw) for kw in harmless)), "drop it: tfring runs on MPI only", ctx.remove_args(call, harmless))


RULES = [rule_imports, rule_missing_names]
