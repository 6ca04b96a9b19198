"""Driver side: check a DataFrame's columns, and stage it as Parquet files in the store for the ranks."""
from pyspark.ml.functions import vector_to_array
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tfring.common.docstrings import fill_docs
from tfring.spark.common.data import row_group_units

_FLOAT_ARRAY = T.ArrayType(T.FloatType())

# feature_expr and label_expr take and give the same things; documented once ("{column_expr}").
_shared_docs = fill_docs({"column_expr": """Args:
    schema: the DataFrame's StructType.
    name: the column.

Returns:
    pyspark.sql.Column, named `name`."""})


def _kind(dtype):
    """'vector', 'array', 'int', 'float' or None (unsupported) for a Spark type."""
    if isinstance(dtype, VectorUDT):
        return "vector"
    if isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, (T.NumericType, T.BooleanType)):
        return "array"
    if isinstance(dtype, (T.IntegralType, T.BooleanType)):
        return "int"
    if isinstance(dtype, T.NumericType):
        return "float"
    return None


def check_columns(schema, role, names):
    """Checks that the columns exist and hold numbers, arrays of numbers or ML vectors.

    Args:
        schema: the DataFrame's StructType.
        role: the estimator argument the names came from (named in errors).
        names: the column names.

    Raises:
        ValueError: a column is missing or of an unsupported type.
    """
    fields = {f.name: f.dataType for f in schema.fields}
    for name in names:
        if name not in fields:
            raise ValueError("%s: column %r is not in the DataFrame (columns: %s)"
                             % (role, name, ", ".join(fields)))
        if _kind(fields[name]) is None:
            raise ValueError("%s: column %r has type %s; supported are numbers, arrays of numbers and "
                             "pyspark.ml.linalg vectors" % (role, name, fields[name].simpleString()))


@_shared_docs
def feature_expr(schema, name):
    """A feature column as float32: array<float> for vectors and arrays, float for scalars.

    {column_expr}
    """
    kind = _kind(schema[name].dataType)
    if kind == "vector":
        return vector_to_array(F.col(name), "float32").alias(name)
    return F.col(name).cast(_FLOAT_ARRAY if kind == "array" else T.FloatType()).alias(name)


@_shared_docs
def label_expr(schema, name):
    """A label column: integers stay integral (sparse losses want them), everything else float32.

    {column_expr}
    """
    if _kind(schema[name].dataType) == "int":
        return F.col(name).cast(T.LongType()).alias(name)
    return feature_expr(schema, name)


def stage(df, store, run_id, feature_cols, label_cols, sample_weight_col, validation, num_files, seed):
    """Writes the training (and validation) rows as Parquet under the store.

    Args:
        df: the DataFrame (columns already checked).
        store: the LocalStore.
        run_id: the run's id (names the data directories).
        feature_cols, label_cols: the columns.
        sample_weight_col: the sample weight column, or None.
        validation: None, a fraction, or a column name.
        num_files: how many files each split is repartitioned into.
        seed: the random split's seed (None: random).

    Returns:
        tuple: (train row-group units, validation row-group units or None); see data.row_group_units.
    """
    schema = df.schema
    cols = [feature_expr(schema, c) for c in feature_cols] + [label_expr(schema, c) for c in label_cols]
    if sample_weight_col:
        cols.append(F.col(sample_weight_col).cast(T.FloatType()).alias(sample_weight_col))
    if isinstance(validation, str):
        is_val = F.coalesce(F.col(validation).cast(T.BooleanType()), F.lit(False))
        train, val = df.filter(~is_val).select(*cols), df.filter(is_val).select(*cols)
    elif validation:
        train, val = df.select(*cols).randomSplit([1.0 - validation, validation], seed=seed)
    else:
        train, val = df.select(*cols), None
    train_path = store.get_train_data_path(run_id)
    train.repartition(num_files).write.mode("overwrite").parquet(store.to_url(train_path))
    val_units = None
    if val is not None:
        val_path = store.get_val_data_path(run_id)
        val.repartition(num_files).write.mode("overwrite").parquet(store.to_url(val_path))
        val_units = row_group_units(val_path)
    return row_group_units(train_path), val_units
