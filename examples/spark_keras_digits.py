"""Keras on a Spark DataFrame: tfring.spark.keras.KerasEstimator fits on scikit-learn's digits with 2 ranks (Spark
tasks), then the returned KerasModel predicts the held-out rows. horovod.spark.keras' recipe with the import changed.

    python examples/spark_keras_digits.py                  # Spark local[2], bound to 127.0.0.1
    python examples/spark_keras_digits.py --master spark://host:7077 --store /shared/dir --num-proc 4

A cluster needs a --store every executor sees at the same path (e.g. NFS).
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from pyspark.ml.functions import array_to_vector  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from tfring.spark.keras import KerasEstimator, Store  # was: from horovod.spark.keras import ...  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--master", default="local[2]")
parser.add_argument("--num-proc", type=int, default=2)
parser.add_argument("--epochs", type=int, default=8)
parser.add_argument("--store", default=None, help="directory for the Parquet data and checkpoints (default: temp)")
parser.add_argument("--target-accuracy", type=float, default=None, help="exit 1 if held-out accuracy is lower")
args = parser.parse_args()

builder = SparkSession.builder.master(args.master).appName("tfring-spark-keras-digits")
if args.master.startswith("local"):  # stay on loopback; the workers use this Python
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")

digits = load_digits()
rows = [(i, (digits.data[i] / 16.0).tolist(), int(digits.target[i])) for i in range(len(digits.target))]
df = spark.createDataFrame(rows, "id long, pixels array<double>, label long")
df = df.withColumn("features", array_to_vector("pixels"))  # ML vectors work as well as arrays
train, test = df.filter("id % 5 != 0"), df.filter("id % 5 = 0")

model = keras.Sequential([
    keras.Input((8, 8, 1)),  # the 64 values of each row are reshaped to the input shape
    keras.layers.Conv2D(16, 3, activation="relu", padding="same"),
    keras.layers.Flatten(),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(10, activation="softmax"),
])
estimator = KerasEstimator(
    num_proc=args.num_proc, model=model, optimizer=keras.optimizers.Adam(0.002),  # x num_proc on the ranks
    loss="sparse_categorical_crossentropy", metrics=["accuracy"], feature_cols=["features"], label_cols=["label"],
    batch_size=32, epochs=args.epochs, validation=0.1, verbose=2, random_seed=1,
    store=Store.create(args.store) if args.store else None,
    backend_env={"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1"})
keras_model = estimator.fit(train)
print("history: %s" % {k: round(v[-1], 4) for k, v in keras_model.getHistory().items()})

predictions = keras_model.transform(test).select("label", "label__output").toPandas()
predicted = np.stack(predictions["label__output"].to_numpy()).argmax(axis=1)
accuracy = float((predicted == predictions["label"].to_numpy()).mean())
print("held-out accuracy %.4f on %d rows (%d ranks)" % (accuracy, len(predictions), args.num_proc))
spark.stop()
if args.target_accuracy is not None and accuracy < args.target_accuracy:
    raise SystemExit("held-out accuracy %.4f below target %.4f" % (accuracy, args.target_accuracy))
