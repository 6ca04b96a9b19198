"""Spark ML Params generated from a table, with Horovod's getter/setter names (getNumProc, setEpochs,
getFeatureCols, ...): what tfring's Spark estimators and models share."""
from pyspark.ml.param import Param, Params, TypeConverters

# The params every estimator and model has, described once (as Horovod's EstimatorParams/ModelParams base
# classes): each framework's table adds its own. name: (description, type converter or None, default).
SHARED_ESTIMATOR_PARAMS = {
    "num_proc": ("number of ranks (default: the SparkContext's defaultParallelism)", None, None),
    "label_cols": ("label columns, one per model output", TypeConverters.toListString, None),
    "sample_weight_col": ("optional column of per-row sample weights", None, None),
    "validation": ("optional fraction (0 < v < 1) of rows held out at random, or a column name whose true/1 rows "
                   "are the validation set", None, None),
    "batch_size": ("rows per batch, per rank", TypeConverters.toInt, 32),
    "val_batch_size": ("rows per validation batch (default: batch_size)", None, None),
    "epochs": ("number of epochs", TypeConverters.toInt, 1),
    "shuffle": ("shuffle each rank's training rows every epoch", TypeConverters.toBoolean, True),
    "partitions_per_process": ("Parquet files written per rank", TypeConverters.toInt, 10),
    "train_steps_per_epoch": ("optional steps per epoch (default: training rows / (batch_size * num_proc))",
                              None, None),
    "validation_steps_per_epoch": ("optional validation steps per epoch (default: each rank's whole shard)",
                                   None, None),
    "store": ("a tfring.spark.common.Store or a path (default: a new temporary directory)", None, None),
    "backend_env": ("environment variables added for the ranks", None, {}),
    "backend": ("a tfring.spark.common.backend.Backend (e.g. SparkBackend) that runs the ranks; sets num_proc",
                None, None),
    "inmemory_cache_all": ("accepted for Horovod's scripts: each rank always holds its shard in memory", None, False),
}

SHARED_MODEL_PARAMS = {
    "feature_columns": ("the feature columns", TypeConverters.toListString, None),
    "label_columns": ("the label columns", TypeConverters.toListString, None),
    "output_cols": ("the prediction columns (default: <label>__output)", TypeConverters.toListString, None),
    "run_id": ("the id of the run that trained the model", None, None),
    "rank_rows": ("the training rows each rank read, in rank order", None, None),
    "rank_steps": ("the training steps each rank ran per epoch, in rank order", None, None),
}


def _camel(name):
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def _getter(name, description):
    def get(self):
        return self.getOrDefault(getattr(self, name))
    get.__name__ = get.__qualname__ = "get" + _camel(name)
    get.__doc__ = "The `%s` param: %s.\n\nReturns:\n    The value (or its default).\n" % (name, description)
    return get


def _setter(name, description):
    def set_(self, value):
        return self._set(**{name: value})
    set_.__name__ = set_.__qualname__ = "set" + _camel(name)
    set_.__doc__ = ("Sets the `%s` param: %s.\n\nArgs:\n    value: the new value.\n\nReturns:\n    self.\n"
                    % (name, description))
    return set_


def with_params(table):
    """Class decorator: adds a Param, a getter and a setter per table entry, and `_defaults()`.

    Args:
        table: {name: (description, type converter or None, default)}.

    Returns:
        The decorator.
    """
    def decorate(cls):
        for name, (description, converter, _) in table.items():
            kw = {"typeConverter": converter} if converter else {}
            setattr(cls, name, Param(Params._dummy(), name, description, **kw))
            for accessor in (_getter(name, description), _setter(name, description)):
                if accessor.__name__ not in cls.__dict__:  # a class may define its own
                    setattr(cls, accessor.__name__, accessor)
        cls._param_table = table
        return cls
    return decorate


def set_params(instance, table, kwargs):
    """Sets defaults, then the given values (None means "not given"), as pyspark's keyword_only setParams does.

    Args:
        instance: a Params object whose class went through `with_params(table)`.
        table: the same table.
        kwargs: {name: value}.

    Returns:
        instance.
    """
    instance._setDefault(**{n: d for n, (_, _, d) in table.items()})
    instance._set(**{n: v for n, v in kwargs.items() if v is not None})
    return instance
