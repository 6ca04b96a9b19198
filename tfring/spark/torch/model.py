"""TorchModel: the Spark transformer TorchEstimator.fit returns (predictions by an iterator pandas UDF)."""
import uuid
from typing import Iterator

import cloudpickle
import numpy as np
import pandas as pd
import torch
from pyspark.ml import Model
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tfring.spark.common import prepare
from tfring.spark.common.params import set_params, with_params
from tfring.spark.torch.params import MODEL_PARAMS


@with_params(MODEL_PARAMS)
class TorchModel(Model):
    """Spark Transformer wrapping a trained torch module: `transform(df)` adds one prediction column per output.

    A prediction column holds the model's output for the row: a double when the output has one value per row,
    else an array<float> of the output's values (flattened; Horovod gives an ML DenseVector). Prediction runs in
    an iterator pandas UDF that unpickles the module once per Python worker from a broadcast. The trained module
    is `getModel()`, the history `getHistory()`.

    Args:
        history: one dict per epoch (see TorchEstimator).
        model: the trained torch.nn.Module.
        optimizer: the optimizer after training (unscaled learning rate).
        loss: the loss function(s).
        loss_constructors: the loss constructors.
        feature_columns: the feature columns, one per forward() argument.
        input_shapes: the shape per feature column, -1 first.
        label_columns: the label columns, one per output (they name the default output columns).
        output_cols: the prediction columns (default `<label>__output`).
        run_id: the id of the run in the store.
        rank_digests: SHA-256 of every rank's final state_dict, in rank order.
        rank_rows: the training rows each rank read, in rank order.
        rank_steps: the training steps each rank ran per epoch, in rank order.
    """

    def __init__(self, *, history=None, model=None, optimizer=None, loss=None, loss_constructors=None,
                 feature_columns=None, input_shapes=None, label_columns=None, output_cols=None, run_id=None,
                 rank_digests=None, rank_rows=None, rank_steps=None):
        super().__init__()
        if output_cols is None and label_columns:
            output_cols = [c + "__output" for c in label_columns]
        given = dict(locals())
        set_params(self, MODEL_PARAMS, {n: given[n] for n in MODEL_PARAMS})

    def _output_sizes(self, df, features, input_shapes):
        """Values per row of each output, from the model run on the DataFrame's first row (None: no rows)."""
        first = df.select(features.alias("f")).limit(1).collect()
        if not first:
            return None
        inputs = [torch.from_numpy(np.asarray(first[0]["f"][c], dtype=np.float32)).reshape(s)
                  for c, s in zip(self.getFeatureColumns(), input_shapes)]
        with torch.no_grad():
            outputs = self.getModel().eval()(*inputs)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        return [int(o.numel()) for o in outputs]

    def _transform(self, df):
        from tfring.spark.torch import predict

        feature_cols, output_cols = self.getFeatureColumns(), self.getOutputCols()
        prepare.check_columns(df.schema, "feature_columns", feature_cols)
        input_shapes = [list(s) for s in self.getInputShapes()]
        features = F.struct(*[prepare.feature_expr(df.schema, c) for c in feature_cols])
        sizes = self._output_sizes(df, features, input_shapes) or [2] * len(output_cols)
        if len(sizes) != len(output_cols):
            raise ValueError("TorchModel: output_cols has %d name(s), the model %d output(s)"
                             % (len(output_cols), len(sizes)))
        scalar = [n == 1 for n in sizes]
        types = [T.DoubleType() if s else T.ArrayType(T.FloatType()) for s in scalar]
        return_type = types[0] if len(types) == 1 else T.StructType(
            [T.StructField(n, t) for n, t in zip(output_cols, types)])
        broadcast = df.sparkSession.sparkContext.broadcast(cloudpickle.dumps(self.getModel().cpu().eval()))
        args = (uuid.uuid4().hex, broadcast, feature_cols, input_shapes, output_cols, scalar, 256)

        def predict_udf(frames):
            return predict.predict_frames(frames, *args)

        # Type hints make it an iterator pandas UDF: the model is unpickled once per partition, not per batch.
        predict_udf.__annotations__ = {"frames": Iterator[pd.DataFrame],
                                       "return": Iterator[pd.Series if len(types) == 1 else pd.DataFrame]}
        udf = F.pandas_udf(predict_udf, return_type)
        if len(output_cols) == 1:
            return df.withColumn(output_cols[0], udf(features))
        tmp = "__tfring_predictions_%s" % uuid.uuid4().hex[:8]
        out = df.withColumn(tmp, udf(features))
        return out.withColumns({n: F.col(tmp)[n] for n in output_cols}).drop(tmp)
