"""Prediction in Spark's Python workers (KerasModel.transform): rebuild the model once per worker process and
predict batch by batch. No pyspark import at module level: the UDF pickles references to these functions."""
import numpy as np

_MODELS = {}  # token -> model: a worker process rebuilds a model once, not once per batch


def _model(token, payload, custom_objects):
    model = _MODELS.get(token)
    if model is None:
        import keras
        model_json, weights = payload
        with keras.utils.custom_object_scope(custom_objects or {}):
            model = keras.models.model_from_json(model_json)
        model.set_weights(weights)
        _MODELS.clear()  # keep one model per worker: a later transform must not pile up old ones
        _MODELS[token] = model
    return model


def predict_frames(frames, token, broadcast, custom_objects, feature_cols, input_shapes, output_cols, scalar_outputs,
                   batch_size):
    """Predicts on each pandas DataFrame of feature columns (what a struct column gives a pandas UDF).

    Args:
        frames: iterator of pandas.DataFrame, one column per feature column.
        token: identifies the model (its cache key in this worker).
        broadcast: the Spark broadcast of (model JSON, weights).
        custom_objects: custom Keras objects for model_from_json.
        feature_cols: the feature columns, in the model's input order.
        input_shapes: the model inputs' shapes without the batch dimension.
        output_cols: one name per model output.
        scalar_outputs: per output, whether it holds one value per row (a double column).
        batch_size: rows per model call.

    Yields:
        pandas.Series (one output) or pandas.DataFrame (one column per output).
    """
    import pandas as pd

    from tfring.spark.common.data import assemble_inputs, series_to_numpy

    model = _model(token, broadcast.value, custom_objects)
    for frame in frames:
        if not len(frame):
            empty = {n: pd.Series([], dtype=np.float64 if s else object) for n, s in zip(output_cols, scalar_outputs)}
            yield empty[output_cols[0]] if len(output_cols) == 1 else pd.DataFrame(empty)
            continue
        x = assemble_inputs([series_to_numpy(frame[c]) for c in feature_cols], feature_cols, input_shapes)
        preds = model.predict(x, batch_size=batch_size, verbose=0)
        if isinstance(preds, dict):  # a model whose outputs are a dict: Keras orders them by output_names
            preds = [preds[n] for n in model.output_names]
        elif not isinstance(preds, (list, tuple)):
            preds = [preds]
        cols = {}
        for name, pred, scalar in zip(output_cols, preds, scalar_outputs):
            pred = np.asarray(pred).reshape(len(frame), -1)
            cols[name] = pd.Series(pred[:, 0].astype(np.float64) if scalar else list(pred.astype(np.float32)))
        yield cols[output_cols[0]] if len(output_cols) == 1 else pd.DataFrame(cols)
