"""TensorFlow 1 constructs (reported, never rewritten: moving a graph/session script to TF2 takes a person).

`tf.X` for the names below is gone from TensorFlow 2 (each list was checked absent on TF 2.21); `tf.compat.v1`'s
session and graph machinery still exists but does not run Keras 3 models (Horovod's TF1 examples use it)."""
import ast

# tf.X absent from TensorFlow 2.21.
GONE = {
    "": "Session InteractiveSession ConfigProto GPUOptions GraphOptions RunOptions RunMetadata placeholder "
        "placeholder_with_default global_variables_initializer local_variables_initializer variables_initializer "
        "global_variables local_variables trainable_variables get_variable variable_scope VariableScope "
        "get_default_session get_default_graph reset_default_graph get_collection add_to_collection GraphKeys "
        "colocate_with AUTO_REUSE layers contrib app logging flags gfile python_io resource_loader Summary estimator "
        "Estimator to_float to_int32 to_int64 log random_normal random_uniform truncated_normal multinomial Print "
        "py_func assign assign_add sparse_to_dense div mod floordiv arg_max arg_min count_nonzero string_to_number "
        "unsorted_segment_sum set_random_seed spectral distributions Dimension wrap_function "
        "enable_eager_execution disable_eager_execution OpError",
    "train": "Saver AdamOptimizer GradientDescentOptimizer MomentumOptimizer RMSPropOptimizer AdagradOptimizer "
             "AdadeltaOptimizer FtrlOptimizer ProximalAdagradOptimizer AdagradDAOptimizer SyncReplicasOptimizer "
             "Optimizer MonitoredTrainingSession MonitoredSession SingularMonitoredSession ChiefSessionCreator "
             "WorkerSessionCreator StopAtStepHook LoggingTensorHook CheckpointSaverHook SessionRunHook SessionRunArgs "
             "NanTensorHook SummarySaverHook StepCounterHook ProfilerHook FinalOpsHook FeedFnHook Scaffold "
             "get_or_create_global_step get_global_step create_global_step global_step start_queue_runners "
             "QueueRunner exponential_decay piecewise_constant polynomial_decay natural_exp_decay inverse_time_decay "
             "cosine_decay batch shuffle_batch string_input_producer import_meta_graph replica_device_setter Server "
             "init_from_checkpoint checkpoint_exists",
    "summary": "FileWriter FileWriterCache merge_all merge",
    "losses": "sparse_softmax_cross_entropy softmax_cross_entropy mean_squared_error log_loss absolute_difference",
}
# tf.compat.v1.X that still exists but is TF1 session/graph machinery.
SESSION = set(
    "Session InteractiveSession ConfigProto GPUOptions GraphOptions RunOptions placeholder placeholder_with_default "
    "global_variables_initializer local_variables_initializer variables_initializer get_default_session "
    "reset_default_graph disable_eager_execution disable_v2_behavior layers estimator train.Saver "
    "train.MonitoredTrainingSession train.MonitoredSession train.Scaffold train.get_or_create_global_step".split())
SESSION |= {"train." + n for n in GONE["train"].split() if n.endswith(("Optimizer", "Hook"))}

_NO_SESSION = "TF2 runs eagerly, without sessions: pin the GPU with tf.config.set_visible_devices(" \
              "gpus[hvd.local_rank()], 'GPU') and set_memory_growth; train with Keras fit() or tf.function"
HINTS = {
    "Session": _NO_SESSION, "InteractiveSession": _NO_SESSION, "ConfigProto": _NO_SESSION, "GPUOptions": _NO_SESSION,
    "placeholder": "function arguments (tf.function)",
    "global_variables_initializer": "nothing: TF2 variables are initialised when created",
    "local_variables_initializer": "nothing: TF2 variables are initialised when created",
    "layers": "keras.layers", "contrib": "removed in TF2: its successor packages (tf-addons, keras)",
    "estimator": "Keras fit() with hvd.DistributedOptimizer (tf.estimator is gone since TF 2.16)",
    "Estimator": "Keras fit() with hvd.DistributedOptimizer (tf.estimator is gone since TF 2.16)",
    "logging": "absl.logging or tf.get_logger()", "app": "absl.app", "flags": "absl.flags", "gfile": "tf.io.gfile",
    "log": "tf.math.log", "random_normal": "tf.random.normal", "random_uniform": "tf.random.uniform",
    "to_float": "tf.cast(x, tf.float32)", "set_random_seed": "tf.random.set_seed",
    "train.MonitoredTrainingSession": "Keras fit() with hvd callbacks, or a tf.function loop with "
                                      "hvd.DistributedGradientTape",
    "train.Saver": "tf.train.Checkpoint",
    "train.get_or_create_global_step": "optimizer.iterations",
    "summary.FileWriter": "tf.summary.create_file_writer",
    "enable_eager_execution": "nothing: TF2 runs eagerly by default",
    "variable_scope": "Keras layers (they own their variables), tf.Module or tf.name_scope",
    "losses.sparse_softmax_cross_entropy": "keras.losses.sparse_categorical_crossentropy(labels, logits, "
                                           "from_logits=True)",
    "losses.softmax_cross_entropy": "keras.losses.categorical_crossentropy(labels, logits, from_logits=True)",
    "train.GradientDescentOptimizer": "keras.optimizers.SGD",
    "train.MomentumOptimizer": "keras.optimizers.SGD(learning_rate, momentum=...)",
    "train.RMSPropOptimizer": "keras.optimizers.RMSprop",
}


def _tf1_names():
    names = {}
    for module, listed in GONE.items():
        for n in listed.split():
            names[(module + "." if module else "") + n] = "gone"
    return names


TF1 = _tf1_names()


def _hint(key):
    leaf = key.rsplit(".", 1)[-1]
    if key in HINTS or leaf in HINTS:
        return HINTS.get(key) or HINTS[leaf]
    if key.startswith("train.") and leaf.endswith("Optimizer"):
        return "keras.optimizers.%s (e.g. tf.train.AdamOptimizer -> keras.optimizers.Adam)" % leaf[:-len("Optimizer")]
    if key.startswith("train.") and ("Hook" in leaf or "Session" in leaf):
        return HINTS["train.MonitoredTrainingSession"]
    return "its TensorFlow 2 equivalent (the TF 2 migration guide lists each)"


def _classify(name):
    """('tf1-api' | 'tf1-session', key) for a dotted name, or None."""
    for prefix, table, rule in (("tensorflow.compat.v1.", SESSION, "tf1-session"), ("tensorflow.", TF1, "tf1-api")):
        if name.startswith(prefix):
            rest = name[len(prefix):]
            for key in table:
                if rest == key or rest.startswith(key + "."):
                    return rule, key
            return None
    return None


def rule_tf1(ctx):
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Attribute):
            name = ctx.qualname(node)
            hit = name and _classify(name)
            if hit and not _classify(ctx.qualname(node.value) or ""):
                yield _finding(ctx, node, ctx.text(node), *hit)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for a in node.names:
                hit = _classify(node.module + "." + a.name)
                if hit:
                    yield _finding(ctx, a, "from %s import %s" % (node.module, a.name), *hit)
        elif isinstance(node, ast.Import):
            for a in node.names:
                hit = _classify(a.name)
                if hit:
                    yield _finding(ctx, a, "import " + a.name, *hit)


def _finding(ctx, node, what, rule, key):
    if rule == "tf1-session":
        what += " (TF1 session/graph API: graph mode only, never with Keras 3 models)"
    else:
        what += " (TF1 API, gone from TensorFlow 2)"
    return ctx.finding(rule, node, what, _hint(key))


RULES = [rule_tf1]
