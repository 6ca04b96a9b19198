"""Keras 2 -> Keras 3: optimizers, compile(), keras.backend (each list below was read off Keras 3.15)."""
import ast

from tfring.migrate.core import Edit, canonical

# Keras 3 optimizer classes (keras.optimizers), and those Keras 2's optimizers.legacy/experimental had.
OPTIMIZERS = {"Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "Ftrl", "Lamb", "Lion", "Nadam",
              "RMSprop", "SGD"}
# Keras 3's keras.backend (Keras 3.15) and TensorFlow's tf.keras.backend (TF 2.21): anything else is gone.
KERAS_BACKEND = {"backend", "clear_session", "epsilon", "floatx", "get_uid", "image_data_format", "is_float_dtype",
                 "is_int_dtype", "is_keras_tensor", "result_type", "set_epsilon", "set_floatx",
                 "set_image_data_format", "standardize_dtype"}
TF_KERAS_BACKEND = KERAS_BACKEND | set(
    "abs all any arange argmax argmin batch_dot batch_flatten batch_get_value batch_normalization batch_set_value "
    "bias_add binary_crossentropy binary_focal_crossentropy cast cast_to_floatx categorical_crossentropy "
    "categorical_focal_crossentropy clip concatenate constant conv1d conv2d conv2d_transpose conv3d cos count_params "
    "ctc_batch_cost ctc_decode ctc_label_dense_to_sparse cumprod cumsum depthwise_conv2d dot dropout dtype elu equal "
    "eval exp expand_dims eye flatten foldl foldr gather get_value gradients greater greater_equal hard_sigmoid "
    "in_top_k int_shape is_sparse l2_normalize less less_equal log map_fn max maximum mean min minimum "
    "moving_average_update name_scope ndim not_equal one_hot ones ones_like permute_dimensions pool2d pool3d pow "
    "prod random_bernoulli random_normal random_normal_variable random_uniform random_uniform_variable relu repeat "
    "repeat_elements reshape resize_images resize_volumes reverse rnn round separable_conv2d set_value shape sigmoid "
    "sign sin softmax softplus softsign sparse_categorical_crossentropy spatial_2d_padding spatial_3d_padding sqrt "
    "square squeeze stack std stop_gradient sum switch tanh temporal_padding tile to_dense transpose "
    "truncated_normal update update_add update_sub var variable zeros zeros_like".split())
SESSION = {"get_session", "set_session", "learning_phase", "set_learning_phase", "get_graph"}
# compile() arguments Keras 2 had and Keras 3 does not.
COMPILE_GONE = {"target_tensors": "gone: pass the targets to fit()",
                "distribute": "gone: build and compile the model under strategy.scope()",
                "sample_weight_mode": "gone: pass sample_weight to fit()"}
# A name bound to hvd.DistributedOptimizer(...) of a TensorFlow/Keras binding is a Keras optimizer too.


def _is_keras_wrapper(name):
    module, _, leaf = (name or "").rpartition(".")
    return leaf in ("DistributedOptimizer", "PartialDistributedOptimizer") and module.replace(
        ".keras", "") in ("horovod.tensorflow", "horovod", "tfring", "tfring.tensorflow")


def _is_optimizer_class(name):
    if name is None or not name.startswith("keras.optimizers."):
        return False
    parts = name.split(".")[2:]
    return parts[-1] in OPTIMIZERS and parts[:-1] in ([], ["legacy"], ["experimental"])


def _optimizer_names(ctx):
    """Local names every assignment binds to a Keras optimizer (constructor or hvd.DistributedOptimizer)."""
    seen = {}
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    call = node.value
                    is_opt = isinstance(call, ast.Call) and (_is_optimizer_class(ctx.keras_name(call.func)) or
                                                             _is_keras_wrapper(ctx.qualname(call.func)))
                    seen[t.id] = seen.get(t.id, True) and is_opt
    return {name for name, is_opt in seen.items() if is_opt}


def rule_optimizers(ctx):
    """lr= / decay= in constructors, optimizers.legacy / .experimental, `.lr` on an optimizer."""
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Call) and _is_optimizer_class(ctx.keras_name(node.func)):
            names = {kw.arg for kw in node.keywords}
            for kw in node.keywords:
                if kw.arg == "lr" and "learning_rate" not in names:
                    s = ctx.start(kw)
                    yield ctx.finding("optimizer-lr", kw, "optimizer argument lr=", "learning_rate=",
                                      [Edit(s, s + 2, "learning_rate")])
                elif kw.arg == "decay":
                    yield ctx.finding("optimizer-decay", kw, "optimizer argument decay= (Keras 3 ignores it)",
                                      "a schedule: learning_rate=keras.optimizers.schedules.InverseTimeDecay(lr, 1, "
                                      "decay) (Keras 2's decay)")
        if isinstance(node, ast.Attribute) and node.attr in ("legacy", "experimental") \
                and ctx.keras_name(node.value) == "keras.optimizers":
            leaf = ctx.parents.get(node)
            what = ctx.text(node)
            if isinstance(leaf, ast.Attribute) and leaf.attr in OPTIMIZERS:
                edit = Edit(ctx.end(node.value), ctx.end(node), "")
                yield ctx.finding("optimizer-legacy", node, what + "." + leaf.attr,
                                  ctx.text(node.value) + "." + leaf.attr, [edit])
            else:
                yield ctx.finding("optimizer-legacy", node, what, "keras.optimizers (Keras 3 has no %s optimizers; a "
                                  "custom legacy Optimizer subclass needs porting to keras.optimizers.Optimizer)"
                                  % node.attr)
        if isinstance(node, ast.ImportFrom) and not node.level and node.module and \
                canonical(node.module) in ("keras.optimizers.legacy", "keras.optimizers.experimental"):
            head = ctx.text(node)
            i = head.find(node.module)
            suffix = node.module.rsplit(".", 1)[1]
            what = "from %s import ..." % node.module
            if i >= 0 and all(a.name in OPTIMIZERS for a in node.names):
                s = ctx.start(node) + i + len(node.module) - len(suffix) - 1
                yield ctx.finding("optimizer-legacy", node, what, "from %s import ..." % node.module[:-len(suffix) - 1],
                                  [Edit(s, s + len(suffix) + 1, "")])
            else:
                yield ctx.finding("optimizer-legacy", node, what, "keras.optimizers (port custom optimizers)")
        elif isinstance(node, ast.ImportFrom) and not node.level and canonical(node.module) == "keras.optimizers":
            for a in node.names:
                if a.name in ("legacy", "experimental"):
                    yield ctx.finding("optimizer-legacy", a, "keras.optimizers.%s" % a.name,
                                      "keras.optimizers (Keras 3 has no %s optimizers)" % a.name)
    optimizers = _optimizer_names(ctx)
    for node in ast.walk(ctx.tree) if ctx.uses_keras else ():
        if isinstance(node, ast.Attribute) and node.attr == "lr":
            base = node.value
            sure = (isinstance(base, ast.Attribute) and base.attr == "optimizer") or (
                isinstance(base, ast.Name) and base.id in optimizers)
            likely = isinstance(base, (ast.Name, ast.Attribute)) and (getattr(base, "id", None) or base.attr).lower() \
                in ("opt", "optimizer", "optim")
            if sure or likely:
                s = ctx.end(node) - 2
                edits = [Edit(s, s + 2, "learning_rate")] if sure and ctx.source[s:s + 2] == "lr" else []
                yield ctx.finding("optimizer-lr", node, ctx.text(node) + " (Keras 3 optimizers have no .lr)",
                                  ctx.text(base) + ".learning_rate", edits)


def rule_variables_call(ctx):
    """opt.variables() -> opt.variables (a property in Keras 3)."""
    for node in ast.walk(ctx.tree) if ctx.uses_keras else ():
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "variables" \
                and not node.args and not node.keywords and ctx.qualname(node.func) is None:
            yield ctx.finding("variables-call", node, ctx.text(node), ctx.text(node.func) + " (a property in Keras 3)",
                              [Edit(ctx.end(node.func), ctx.end(node), "")])


def _method_call(ctx, node, names):
    """Is `node` a call of a method in `names` on a value (not a module's function, like re.compile)?"""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names \
        and ctx.qualname(node.func) is None


def rule_compile(ctx):
    for node in ast.walk(ctx.tree):
        if not _method_call(ctx, node, ("compile",)):
            continue
        for kw in node.keywords:
            if kw.arg == "experimental_run_tf_function":
                yield ctx.finding("compile-args", kw, "compile(experimental_run_tf_function=...)",
                                  "drop it (Keras 3 has no such argument; hvd.DistributedOptimizer reduces in apply())",
                                  ctx.remove_args(node, [kw]))
            elif kw.arg == "experimental_steps_per_execution":
                s = ctx.start(kw)
                yield ctx.finding("compile-args", kw, "compile(experimental_steps_per_execution=...)",
                                  "steps_per_execution=", [Edit(s, s + len(kw.arg), "steps_per_execution")])
            elif kw.arg in COMPILE_GONE:
                yield ctx.finding("compile-args", kw, "compile(%s=...)" % kw.arg, COMPILE_GONE[kw.arg])


def _primary(ctx, node):
    """`node`'s text, parenthesised unless `.attr` can follow it as it is."""
    text = ctx.text(node)
    simple = isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) and "\n" not in text
    return (text, True) if simple else ("(" + text + ")", False)


def rule_backend(ctx):
    """K.set_value(x, v) -> x.assign(v), K.get_value(x) -> x.numpy(); other gone backend functions reported."""
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Call):
            name = ctx.qualname(node.func)
            if name in ("keras.backend.set_value", "tensorflow.keras.backend.set_value") and len(node.args) == 2 \
                    and not node.keywords:
                x, v = node.args
                _, simple = _primary(ctx, x)
                edits = [Edit(ctx.start(node), ctx.start(x), "" if simple else "("),
                         Edit(ctx.end(x), ctx.start(v), (")" if not simple else "") + ".assign("),
                         Edit(ctx.end(v), ctx.end(node), ")")]
                yield ctx.finding("backend-value", node, "%s(x, v)" % ctx.text(node.func), "x.assign(v)", edits)
                continue
            if name in ("keras.backend.get_value", "tensorflow.keras.backend.get_value") and len(node.args) == 1 \
                    and not node.keywords:
                x = node.args[0]
                _, simple = _primary(ctx, x)
                edits = [Edit(ctx.start(node), ctx.start(x), "" if simple else "("),
                         Edit(ctx.end(x), ctx.end(node), (")" if not simple else "") + ".numpy()")]
                yield ctx.finding("backend-value", node, "%s(x)" % ctx.text(node.func), "x.numpy()", edits)
                continue
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            module = ctx.qualname(node.value)
            if module and module.startswith("tensorflow.compat.v1.keras"):
                module = "tensorflow.keras" + module[len("tensorflow.compat.v1.keras"):]
            allowed = {"keras.backend": KERAS_BACKEND, "tensorflow.keras.backend": TF_KERAS_BACKEND}.get(module)
            if allowed is None or node.attr in allowed:
                continue
            call = ctx.parents.get(node)
            if node.attr in ("set_value", "get_value") and isinstance(call, ast.Call) and call.func is node:
                if len(call.args) == (2 if node.attr == "set_value" else 1) and not call.keywords:
                    continue  # rewritten above
            if node.attr in ("learning_phase", "set_learning_phase"):
                instead = "the training= argument of the model or layer call"
            elif node.attr in SESSION:
                instead = "TF2 has no sessions: pin devices with tf.config.set_visible_devices(gpus[hvd.local_rank()]" \
                          ", 'GPU') and tf.config.experimental.set_memory_growth(gpu, True)"
            else:
                instead = "keras.ops (or keras.config for settings)"
            yield ctx.finding("backend-gone", node, "%s.%s (not in Keras 3's %s)" % (
                ctx.text(node.value), node.attr, module.replace("tensorflow.", "tf.")), instead)


RULES = [rule_optimizers, rule_variables_call, rule_compile, rule_backend]
