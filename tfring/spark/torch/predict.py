"""Prediction in Spark's Python workers (TorchModel.transform): unpickle the model once per worker process and
predict batch by batch. No pyspark import at module level: the UDF pickles references to these functions."""
import sys

import numpy as np

_MODELS = {}  # token -> model: a worker process unpickles a model once, not once per batch


def _model(token, payload):
    model = _MODELS.get(token)
    if model is None:
        import cloudpickle
        if "tensorflow" in sys.modules:
            # Spark reuses its Python workers: one that predicted for a Keras model holds TensorFlow, and
            # unpickling a Lightning module imports torch._dynamo, which imports triton, whose import crashes
            # (SIGSEGV) a process holding TensorFlow. Prediction never compiles: torch goes on without triton.
            sys.modules.setdefault("triton", None)
        model = cloudpickle.loads(payload)
        model.eval()
        _MODELS.clear()  # keep one model per worker: a later transform must not pile up old ones
        _MODELS[token] = model
    return model


def predict_frames(frames, token, broadcast, feature_cols, input_shapes, output_cols, scalar_outputs, batch_size):
    """Predicts on each pandas DataFrame of feature columns (what a struct column gives a pandas UDF).

    Args:
        frames: iterator of pandas.DataFrame, one column per feature column.
        token: identifies the model (its cache key in this worker).
        broadcast: the Spark broadcast of the cloudpickled torch module.
        feature_cols: the feature columns, one per forward() argument.
        input_shapes: the shape per feature column, -1 first (the batch).
        output_cols: one name per model output.
        scalar_outputs: per output, whether it holds one value per row (a double column).
        batch_size: rows per model call.

    Yields:
        pandas.Series (one output) or pandas.DataFrame (one column per output).
    """
    import pandas as pd
    import torch

    from tfring.spark.common.data import series_to_numpy

    model = _model(token, broadcast.value)
    for frame in frames:
        if not len(frame):
            empty = {n: pd.Series([], dtype=np.float64 if s else object) for n, s in zip(output_cols, scalar_outputs)}
            yield empty[output_cols[0]] if len(output_cols) == 1 else pd.DataFrame(empty)
            continue
        inputs = [torch.from_numpy(series_to_numpy(frame[c])).reshape(s) for c, s in zip(feature_cols, input_shapes)]
        chunks = []
        with torch.no_grad():
            for start in range(0, len(frame), batch_size):
                preds = model(*[x[start:start + batch_size] for x in inputs])
                preds = preds if isinstance(preds, (list, tuple)) else [preds]
                chunks.append([p.detach().cpu().numpy().reshape(p.shape[0], -1) for p in preds])
        cols = {}
        for i, (name, scalar) in enumerate(zip(output_cols, scalar_outputs)):
            pred = np.concatenate([c[i] for c in chunks])
            cols[name] = pd.Series(pred[:, 0].astype(np.float64) if scalar else list(pred.astype(np.float32)))
        yield cols[output_cols[0]] if len(output_cols) == 1 else pd.DataFrame(cols)
