"""Keras on Spark DataFrames with tfring, as `horovod.spark.keras`.

    from tfring.spark.keras import KerasEstimator
    est = KerasEstimator(num_proc=2, model=model, optimizer=keras.optimizers.Adam(1e-3),
                         loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                         feature_cols=["features"], label_cols=["label"], batch_size=32, epochs=5)
    keras_model = est.fit(train_df)                    # a KerasModel (Spark ML Model)
    predictions = keras_model.transform(test_df)       # adds "label__output"
"""
from tfring.spark.common.store import LocalStore, Store
from tfring.spark.keras.estimator import KerasEstimator, KerasModel

__all__ = ["KerasEstimator", "KerasModel", "LocalStore", "Store"]
