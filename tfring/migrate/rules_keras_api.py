"""Keras 2 -> Keras 3: fit_generator and friends, moved and removed modules, save formats."""
import ast

from tfring.migrate.core import Edit, canonical

# Keras 2 method -> (Keras 3 method, Keras 2 positional parameter names).
GENERATORS = {
    "fit_generator": ("fit", ["x", "steps_per_epoch", "epochs", "verbose", "callbacks", "validation_data",
                              "validation_steps", "validation_freq", "class_weight", "max_queue_size", "workers",
                              "use_multiprocessing", "shuffle", "initial_epoch"]),
    "evaluate_generator": ("evaluate", ["x", "steps", "callbacks", "max_queue_size", "workers", "use_multiprocessing",
                                        "verbose"]),
    "predict_generator": ("predict", ["x", "steps", "callbacks", "max_queue_size", "workers", "use_multiprocessing",
                                      "verbose"]),
}
# Keras 3 takes these from the PyDataset (keras.utils.PyDataset(workers=..., use_multiprocessing=...)), not fit().
LOADER_ARGS = ("workers", "use_multiprocessing", "max_queue_size")
# Keras 2 module -> its Keras 3 home (the names inside kept theirs).
MOVED = {"keras.layers.%s" % m: "keras.layers" for m in (
    "core", "convolutional", "pooling", "normalization", "merge", "recurrent", "embeddings", "advanced_activations",
    "noise", "wrappers", "local", "convolutional_recurrent", "experimental.preprocessing")}
MOVED["keras.utils.np_utils"] = "keras.utils"
PREPROCESSING_LAYERS = {
    "CategoryEncoding", "CenterCrop", "Discretization", "Hashing", "IntegerLookup", "Normalization", "RandomBrightness",
    "RandomContrast", "RandomCrop", "RandomFlip", "RandomRotation", "RandomTranslation", "RandomZoom", "Rescaling",
    "Resizing", "StringLookup", "TextVectorization"}
# Gone from Keras 3 under any spelling (tf.keras too): what to use instead.
REMOVED = {
    "keras.wrappers.scikit_learn": "keras.wrappers.SKLearnClassifier / SKLearnRegressor (or the scikeras package)",
    "keras.mixed_precision.experimental": "keras.mixed_precision.set_global_policy('mixed_float16'); "
                                          "keras.optimizers.LossScaleOptimizer",
    "keras.engine": "keras.Model, keras.layers.Layer, keras.Input (public names)",
    "keras.utils.multi_gpu_model": "one process per GPU with tfringrun (that is what tfring is for)",
    "keras.layers.experimental": "keras.layers (preprocessing layers moved there)",
    "keras.layers.CuDNNLSTM": "keras.layers.LSTM (uses cuDNN when it can)",
    "keras.layers.CuDNNGRU": "keras.layers.GRU (uses cuDNN when it can)",
}
# Gone from the keras package only (TensorFlow's tf.keras keeps a deprecated copy).
REMOVED_KERAS_PACKAGE = {
    "keras.preprocessing.image.ImageDataGenerator": "augmentation layers (keras.layers.RandomRotation, RandomZoom, "
                                                    "RandomTranslation, ...) or tf.data",
    "keras.preprocessing.text": "keras.layers.TextVectorization",
}
METHODS_GONE = {"predict_classes": "np.argmax(model.predict(x), axis=-1)",
                "predict_proba": "model.predict(x)"}


def _method_call(ctx, node, names):
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names \
        and ctx.qualname(node.func) is None


def _generator_call(ctx, call):
    new, params = GENERATORS[call.func.attr]
    what = "%s(...)" % ctx.text(call.func)
    s = ctx.end(call.func) - len(call.func.attr)
    edits = [Edit(s, ctx.end(call.func), new)]
    for i, arg in enumerate(call.args[1:], 1):
        before = ctx.source[:ctx.start(arg)].rstrip()
        if isinstance(arg, ast.Starred) or i >= len(params) or params[i] in LOADER_ARGS or not before.endswith(","):
            return ctx.finding("fit-generator", call, what, "%s(...), with the arguments by name" % new)
        edits.append(Edit(ctx.start(arg), ctx.start(arg), params[i] + "="))
    drop = [kw for kw in call.keywords if kw.arg in LOADER_ARGS]
    for kw in call.keywords:
        if kw.arg == "generator":
            edits.append(Edit(ctx.start(kw), ctx.start(kw) + len("generator"), "x"))
    if drop:
        edits += ctx.remove_args(call, drop)
    return ctx.finding("fit-generator", call, what, "%s(...)%s" % (new, " without %s (give them to a "
                       "keras.utils.PyDataset)" % ", ".join(kw.arg for kw in drop) if drop else ""), edits)


def rule_fit(ctx):
    for node in ast.walk(ctx.tree) if ctx.uses_keras else ():
        if _method_call(ctx, node, GENERATORS):
            yield _generator_call(ctx, node)
        elif _method_call(ctx, node, ("fit", "evaluate", "predict")):
            drop = [kw for kw in node.keywords if kw.arg in LOADER_ARGS]
            if drop:
                yield ctx.finding("fit-loader-args", drop[0], "%s(%s=...)" % (node.func.attr, drop[0].arg),
                                  "drop %s: Keras 3 takes them from a keras.utils.PyDataset" % ", ".join(
                                      kw.arg for kw in drop), ctx.remove_args(node, drop))
        elif _method_call(ctx, node, METHODS_GONE):
            yield ctx.finding("keras-removed", node, ".%s() (gone since TF 2.6)" % node.func.attr,
                              METHODS_GONE[node.func.attr])


def _module_edit(ctx, node, raw, new):
    """Edit turning the module text `raw` of an ImportFrom into `new`, or None when it is spelled oddly."""
    i = ctx.text(node).find(raw)
    return None if i < 0 else Edit(ctx.start(node) + i, ctx.start(node) + i + len(raw), new)


def rule_modules(ctx):
    """Moved modules (mechanical) and removed ones (reported)."""
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for f in _import_from(ctx, node):
                yield f
        elif isinstance(node, ast.Import):
            for a in node.names:
                hit = _removed(canonical(a.name), a.name) or (
                    "%s (a module Keras 3 does not have)" % MOVED[canonical(a.name)]
                    if canonical(a.name) in MOVED else None)
                if hit:
                    yield ctx.finding("keras-removed", a, "import " + a.name, hit)
        elif isinstance(node, ast.Attribute):
            for f in _attribute(ctx, node):
                yield f


def _removed(name, raw):
    for table, key_name in ((REMOVED, name), (REMOVED_KERAS_PACKAGE, raw)):
        for key, instead in table.items():
            if key_name == key or key_name.startswith(key + "."):
                return instead
    return None


def _import_from(ctx, node):
    module = canonical(node.module)
    if module in MOVED and (module != "keras.layers.experimental.preprocessing" or all(
            a.name in PREPROCESSING_LAYERS for a in node.names)):
        new = node.module[:len(node.module) - len(module) + len("keras")] + MOVED[module][len("keras"):]
        edit = _module_edit(ctx, node, node.module, new)
        yield ctx.finding("keras-moved", node, "from %s import ..." % node.module, "from %s import ..." % new,
                          [edit] if edit else [])
        return
    for a in node.names:
        full = module + "." + a.name
        hit = _removed(full, node.module + "." + a.name)
        if hit:
            yield ctx.finding("keras-removed", a, full, hit)


def _attribute(ctx, node):
    raw = ctx.qualname(node)
    if raw is None:
        return
    name = canonical(raw)
    inner = canonical(ctx.qualname(node.value))
    if name in MOVED and inner not in MOVED:
        use = ctx.parents.get(node)
        base = node
        while isinstance(base, ast.Attribute) and canonical(ctx.qualname(base)) != MOVED[name]:
            base = base.value
        ok = isinstance(use, ast.Attribute) and canonical(ctx.qualname(base)) == MOVED[name] and (
            name != "keras.layers.experimental.preprocessing" or use.attr in PREPROCESSING_LAYERS)
        yield ctx.finding("keras-moved", node, ctx.text(node), MOVED[name],
                          [Edit(ctx.end(base), ctx.end(node), "")] if ok else [])
        return
    hit = _removed(name, raw)
    if not hit or (inner is not None and _removed(inner, ctx.qualname(node.value))):
        return
    use = ctx.parents.get(node)
    if name == "keras.layers.experimental" and isinstance(use, ast.Attribute) and use.attr == "preprocessing":
        return  # keras.layers.experimental.preprocessing: moved, above
    yield ctx.finding("keras-removed", node, ctx.text(node), hit)


def _literal(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def rule_save(ctx):
    """save_format=, weights files not named *.weights.h5, ModelCheckpoint paths Keras 3 refuses."""
    for node in ast.walk(ctx.tree):
        if not isinstance(node, ast.Call):
            continue
        kwargs = {kw.arg: kw for kw in node.keywords}
        if _method_call(ctx, node, ("save", "save_weights")) and "save_format" in kwargs:
            yield ctx.finding("save-format", kwargs["save_format"], "%s(save_format=...)" % node.func.attr,
                              "model.export(path) for a SavedModel, else a path ending in .keras / .weights.h5")
        if _method_call(ctx, node, ("save_weights",)) and node.args:
            path = _literal(node.args[0])
            if path is not None and not path.endswith(".weights.h5"):
                yield ctx.finding("save-format", node.args[0], "save_weights(%r)" % path,
                                  "a name ending in .weights.h5 (Keras 3 refuses others)")
        if ctx.keras_name(node.func) == "keras.callbacks.ModelCheckpoint":
            path = _literal(node.args[0]) if node.args else _literal(getattr(kwargs.get("filepath"), "value", None))
            weights = kwargs.get("save_weights_only")
            weights = weights is not None and isinstance(weights.value, ast.Constant) and weights.value.value is True
            if path is None:
                continue
            if weights and not path.endswith(".weights.h5"):
                yield ctx.finding("save-format", node, "ModelCheckpoint(%r, save_weights_only=True)" % path,
                                  "a name ending in .weights.h5 (Keras 3 refuses others)")
            elif not weights and not path.endswith((".keras", ".h5")):
                yield ctx.finding("save-format", node, "ModelCheckpoint(%r)" % path,
                                  "a name ending in .keras (Keras 3 refuses SavedModel directories)")


RULES = [rule_fit, rule_modules, rule_save]
