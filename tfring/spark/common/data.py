"""Rank-side data: read this rank's shard of the staged Parquet files and shape columns into model inputs.

No pyspark here: the ranks (and the prediction UDF) import this module without a SparkContext.
"""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset
import pyarrow.parquet as pq


def row_group_units(path):
    """The non-empty row groups of a Parquet directory, in a fixed order.

    Args:
        path: a directory written by Spark (its `_SUCCESS`/`.crc` files are skipped by pyarrow.dataset).

    Returns:
        list: (file, row group index, number of rows) tuples.
    """
    units = []
    for f in sorted(pyarrow.dataset.dataset(path, format="parquet").files):
        meta = pq.read_metadata(f)
        for i in range(meta.num_row_groups):
            n = meta.row_group(i).num_rows
            if n:
                units.append((f, i, n))
    return units


def shard_bounds(total, rank, size):
    """Rank's contiguous slice [start, end) of `total` rows; slices differ by at most one row.

    Args:
        total: number of rows.
        rank: this rank.
        size: number of ranks.

    Returns:
        tuple: (start, end).
    """
    return total * rank // size, total * (rank + 1) // size


def read_shard(units, rank, size, columns):
    """Reads only the row groups that overlap this rank's slice of the rows.

    Args:
        units: `row_group_units()` of the data (computed once, on the driver).
        rank: this rank.
        size: number of ranks.
        columns: the columns to read.

    Returns:
        pyarrow.Table: the rank's rows.
    """
    start, end = shard_bounds(sum(n for _, _, n in units), rank, size)
    pieces, offset = [], 0
    for f, i, n in units:
        lo, hi = max(start, offset), min(end, offset + n)
        if lo < hi:
            table = pq.ParquetFile(f).read_row_group(i, columns=columns)
            pieces.append(table.slice(lo - offset, hi - lo))
        offset += n
    if not pieces:
        raise ValueError("rank %d of %d has no rows to read" % (rank, size))
    return pa.concat_tables(pieces)


def column_to_numpy(table, name):
    """A column as a 2-D (rows, values) array for list columns, else 1-D.

    Args:
        table: a pyarrow.Table.
        name: the column.

    Returns:
        numpy.ndarray.

    Raises:
        ValueError: the column has nulls or arrays of different lengths.
    """
    col = table.column(name).combine_chunks()
    if col.null_count:
        raise ValueError("column %r has %d null value(s)" % (name, col.null_count))
    if not pa.types.is_list(col.type) and not pa.types.is_large_list(col.type):
        return col.to_numpy(zero_copy_only=False)
    lengths = pc.list_value_length(col)
    lo, hi = pc.min(lengths).as_py(), pc.max(lengths).as_py()
    if lo != hi:
        raise ValueError("column %r has arrays of different lengths (%s to %s)" % (name, lo, hi))
    values = col.flatten()
    if values.null_count:
        raise ValueError("column %r has null array elements" % name)
    return values.to_numpy(zero_copy_only=False).reshape(len(col), lo or 0)


def _reshape(name, array, shape):
    """array (rows, ...) reshaped to (rows,) + shape, where shape may hold one None."""
    dims = [-1 if d is None else d for d in shape]
    per_row = int(np.prod(array.shape[1:], dtype=np.int64))
    known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    if (-1 in dims and per_row % max(known, 1)) or (-1 not in dims and per_row != known):
        raise ValueError("column(s) %s hold %d value(s) per row; the model expects shape %s"
                         % (name, per_row, tuple(shape)))
    return array.reshape((len(array),) + tuple(dims))


def assemble_inputs(arrays, names, input_shapes):
    """Shapes feature columns into the model's inputs.

    One column per input; or, for a model with a single input, several columns concatenated row-wise
    (e.g. scalar columns of a tabular model).

    Args:
        arrays: per feature column, a (rows,) or (rows, values) array.
        names: the feature columns' names (for errors).
        input_shapes: the model inputs' shapes without the batch dimension.

    Returns:
        A single float32 array, or a tuple of them (one per input).

    Raises:
        ValueError: the columns do not fit the inputs.
    """
    arrays = [a.reshape(len(a), -1) for a in arrays]
    if len(input_shapes) == 1 and len(arrays) > 1:
        arrays, names = [np.concatenate(arrays, axis=1)], [", ".join(names)]
    if len(arrays) != len(input_shapes):
        raise ValueError("feature_cols: %d column(s) for a model with %d inputs" % (len(arrays), len(input_shapes)))
    out = tuple(_reshape(n, a.astype(np.float32, copy=False), s) for n, a, s in zip(names, arrays, input_shapes))
    return out[0] if len(out) == 1 else out


def assemble_labels(arrays, names, output_shapes):
    """Shapes label columns for the model's outputs: scalar labels stay 1-D (sparse losses), array labels take
    the output's shape when their sizes match.

    Args:
        arrays: per label column, a (rows,) or (rows, values) array.
        names: the label columns' names (for errors).
        output_shapes: the model outputs' shapes without the batch dimension.

    Returns:
        A single array, or a tuple of them (one per output).

    Raises:
        ValueError: the number of label columns is not the number of outputs.
    """
    if len(arrays) != len(output_shapes):
        raise ValueError("label_cols: %d column(s) for a model with %d outputs" % (len(arrays), len(output_shapes)))
    out = []
    for a, shape in zip(arrays, output_shapes):
        if a.dtype.kind == "f":
            a = a.astype(np.float32, copy=False)
        if a.ndim > 1 and None not in shape and a.shape[1] == int(np.prod(shape, dtype=np.int64)):
            a = a.reshape((len(a),) + tuple(shape))
        out.append(a)
    return out[0] if len(out) == 1 else tuple(out)


def check_first_row(units, feature_cols, label_cols, input_shapes, output_shapes):
    """Shapes the first staged row as a rank will, so a shape mismatch fails on the driver, before any job.

    Args:
        units: `row_group_units()` of the training data.
        feature_cols, label_cols: the columns.
        input_shapes, output_shapes: the model's, without the batch dimension.

    Raises:
        ValueError: the columns do not fit the model.
    """
    f, i, _ = units[0]
    table = pq.ParquetFile(f).read_row_group(i, columns=feature_cols + label_cols).slice(0, 1)
    assemble_inputs([column_to_numpy(table, c) for c in feature_cols], feature_cols, input_shapes)
    assemble_labels([column_to_numpy(table, c) for c in label_cols], label_cols, output_shapes)


def series_to_numpy(series):
    """A pandas Series of a prediction UDF's feature column as float32: 2-D for arrays, else 1-D.

    Args:
        series: pandas.Series of numbers or of arrays (what Spark gives a pandas UDF for array<float>).

    Returns:
        numpy.ndarray.
    """
    values = series.to_numpy()
    if len(values) and isinstance(values[0], (np.ndarray, list, tuple)):
        return np.stack([np.asarray(v, dtype=np.float32) for v in values])
    return values.astype(np.float32)
