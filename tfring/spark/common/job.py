"""What every Spark estimator does around its ranks: refuse Horovod arguments tfring lacks, check the common
arguments, resolve the store, run the job, and fingerprint the weights each rank ends with.

No framework import here: the Keras and torch estimators both build on it.
"""
import hashlib
import numbers
import os
import tempfile
import time
import uuid

from tfring.spark.common import prepare
from tfring.spark.common.store import LocalStore, Store


# The estimators' shared arguments, documented once: each estimator's docstring names the block
# ("{backend_args}") and `shared_docs` fills it in (as Keras' optimizers share their keyword docs).
BACKEND_ARGS = """backend_env: {name: value} added to the ranks' environment.
        backend: a `tfring.spark.common.backend.Backend` (e.g. `SparkBackend(num_proc=2, stdout=sys.stdout,
            prefix_output_with_timestamp=True)`) that runs the ranks; it sets the number of ranks (num_proc must
            then be left out).
        inmemory_cache_all: accepted (True or False) for Horovod's scripts: each rank always reads its shard once
            and holds it in memory, which is what True asks of Horovod."""


def shared_docs(cls):
    """Class decorator: fills the estimators' shared argument docs into cls's docstring.

    Args:
        cls: an estimator class whose docstring holds "{backend_args}".

    Returns:
        cls
    """
    cls.__doc__ = cls.__doc__.replace("{backend_args}", BACKEND_ARGS)
    return cls


def check_unsupported(owner, unsupported, given):
    """Raises for Horovod arguments tfring does not implement (unless left at their "not used" value).

    Args:
        owner: the class name, for the message.
        unsupported: {argument: the value that means "not used"}.
        given: {argument: value} the caller passed beyond the supported ones.

    Raises:
        ValueError: an argument is unknown, or an unsupported one is set.
    """
    for name, value in given.items():
        if name not in unsupported:
            raise ValueError("%s: unknown argument %r" % (owner, name))
        if value != unsupported[name]:
            raise ValueError("%s: argument %r (Horovod) is not supported by tfring" % (owner, name))


def check_data_args(owner, estimator, df):
    """Checks the arguments every estimator shares against the DataFrame, before anything is written.

    Args:
        owner: the class name, for messages.
        estimator: the estimator (its getters: getFeatureCols, getLabelCols, getSampleWeightCol, getValidation,
            getStore, and getOrDefault for the integer arguments).
        df: the DataFrame to fit.

    Raises:
        ValueError: a column is missing or unsupported, validation is neither a column nor a fraction, an integer
            argument is not positive, or the store is neither a Store nor a path.
    """
    feature_cols, label_cols = estimator.getFeatureCols(), estimator.getLabelCols()
    if not feature_cols:
        raise ValueError("%s: feature_cols is required" % owner)
    if not label_cols:
        raise ValueError("%s: label_cols is required" % owner)
    prepare.check_columns(df.schema, "feature_cols", feature_cols)
    prepare.check_columns(df.schema, "label_cols", label_cols)
    if estimator.getSampleWeightCol():
        prepare.check_columns(df.schema, "sample_weight_col", [estimator.getSampleWeightCol()])
    validation = estimator.getValidation()
    if isinstance(validation, str):
        if validation not in df.columns:
            raise ValueError("%s: validation column %r is not in the DataFrame" % (owner, validation))
    elif validation is not None and not (isinstance(validation, numbers.Real) and 0 <= validation < 1):
        raise ValueError("%s: validation=%r must be a column name or a fraction in [0, 1)" % (owner, validation))
    for name in ("num_proc", "batch_size", "val_batch_size", "epochs", "partitions_per_process",
                 "train_steps_per_epoch", "validation_steps_per_epoch"):
        value = estimator.getOrDefault(name)
        if value is not None and (not isinstance(value, numbers.Integral) or value < 1):
            raise ValueError("%s: %s=%r must be a positive integer" % (owner, name, value))
    backend = estimator.getOrDefault("backend")
    if backend is not None:
        if not (callable(getattr(backend, "run", None)) and callable(getattr(backend, "num_processes", None))):
            raise ValueError("%s: backend must be a tfring.spark.common.backend.Backend (run, num_processes), got %r"
                             % (owner, backend))
        if estimator.getOrDefault("num_proc") is not None:
            raise ValueError("%s: give num_proc or backend, not both (the backend sets the number of ranks)" % owner)
    if not isinstance(estimator.getOrDefault("inmemory_cache_all"), bool):
        raise ValueError("%s: inmemory_cache_all must be True or False" % owner)
    store = estimator.getStore()
    if store is not None and not isinstance(store, (Store, str)):
        raise ValueError("%s: store must be a tfring.spark.common.Store or a path, got %r" % (owner, store))


def resolve_num_proc(estimator, df):
    """The number of ranks: the backend's, else num_proc, else the SparkContext's defaultParallelism.

    Args:
        estimator: the estimator (its backend and num_proc params).
        df: the DataFrame to fit.

    Returns:
        int.
    """
    backend = estimator.getOrDefault("backend")
    if backend is not None:
        return backend.num_processes()
    return estimator.getOrDefault("num_proc") or df.sparkSession.sparkContext.defaultParallelism


def resolve_store(store):
    """The estimator's store argument as a Store.

    Args:
        store: a Store, a path for `Store.create`, or None (a new temporary directory).

    Returns:
        Store.

    Raises:
        ValueError: the path is not a local or shared filesystem path (from `Store.create`).
    """
    if isinstance(store, str):
        return Store.create(store)
    return store if store is not None else LocalStore(tempfile.mkdtemp(prefix="tfring-spark-"))


def resolve_run(estimator, df, run_prefix):
    """What every estimator's fit starts from: the number of ranks, the store and the run's id.

    Args:
        estimator: the estimator (its backend, num_proc, store and run_id params).
        df: the DataFrame to fit.
        run_prefix: the run id's prefix when run_id is not set (`<prefix>_<time>_<random>`).

    Returns:
        tuple: (num_proc, Store, run_id).
    """
    num_proc = resolve_num_proc(estimator, df)
    store = resolve_store(estimator.getStore())
    run_id = estimator.getRunId() or "%s_%d_%s" % (run_prefix, time.time(), uuid.uuid4().hex[:8])
    return num_proc, store, run_id


def stage_data(owner, estimator, df, store, run_id, num_proc):
    """Stages the training (and validation) rows in the store and checks there are enough for the ranks.

    Args:
        owner: the class name, for messages.
        estimator: the estimator (feature/label/sample weight columns, validation, partitions, seed).
        df: the DataFrame.
        store: the Store.
        run_id: the run's id.
        num_proc: the number of ranks.

    Returns:
        tuple: (train units, validation units or None, training rows, validation rows); units as
        `data.row_group_units`.

    Raises:
        ValueError: fewer training (or validation) rows than ranks.
    """
    validation = estimator.getValidation() or None
    train_units, val_units = prepare.stage(
        df, store, run_id, estimator.getFeatureCols(), estimator.getLabelCols(), estimator.getSampleWeightCol(),
        validation, num_proc * estimator.getPartitionsPerProcess(), estimator.getRandomSeed())
    train_rows = sum(n for _, _, n in train_units)
    val_rows = sum(n for _, _, n in val_units or [])
    if train_rows < num_proc:
        raise ValueError("%s: %d training row(s) for num_proc=%d ranks" % (owner, train_rows, num_proc))
    if validation is not None and val_rows < num_proc:
        raise ValueError("%s: validation=%r leaves %d row(s) for num_proc=%d ranks"
                         % (owner, validation, val_rows, num_proc))
    return train_units, val_units, train_rows, val_rows


def run_job(fn, spec, num_proc, env, verbose, backend=None):
    """Runs fn(spec) on num_proc Spark tasks as one tfring job, or through the estimator's backend.

    Args:
        fn: the rank function.
        spec: its one argument (cloudpickled).
        num_proc: the number of ranks.
        env: environment variables added for the ranks.
        verbose: 0 silences the ranks' output (a rank's error still comes back raised); with a backend its own
            output settings apply.
        backend: a `tfring.spark.common.backend.Backend`, or None (`tfring.spark.run`).

    Returns:
        list: fn's results in rank order.
    """
    import tfring.spark
    if backend is not None:
        return backend.run(fn, args=(spec,), env=env)
    if verbose:
        return tfring.spark.run(fn, args=(spec,), num_proc=num_proc, env=env)
    with open(os.devnull, "w") as quiet:
        return tfring.spark.run(fn, args=(spec,), num_proc=num_proc, env=env, stdout=quiet)


def weights_digest(weights):
    """SHA-256 of a model's weights, to check that every rank ended with the same ones.

    Args:
        weights: a list of numpy arrays (Keras' `model.get_weights()`, or a torch state_dict's values as numpy).

    Returns:
        str: the hex digest.
    """
    import numpy as np
    h = hashlib.sha256()
    for w in weights:
        w = np.ascontiguousarray(w)
        h.update(str((w.dtype.str, w.shape)).encode())
        h.update(w.tobytes())
    return h.hexdigest()
