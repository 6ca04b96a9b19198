"""PyTorch Lightning 2.x on Spark DataFrames with tfring, as `horovod.spark.lightning` (whose `TorchEstimator` /
`TorchModel` names are aliases here).

    from tfring.spark.lightning import LightningEstimator
    est = LightningEstimator(num_proc=2, model=lightning_module, feature_cols=["features"], label_cols=["label"],
                             batch_size=32, epochs=5, validation=0.1)
    lightning_model = est.fit(train_df)                # a LightningModel (Spark ML Model)
    predictions = lightning_model.transform(test_df)   # adds "label__output"

Lightning itself is imported on the ranks and when `fit` checks the module, not by this import.
"""
from tfring.spark.common.store import LocalStore, Store
from tfring.spark.lightning.estimator import LightningEstimator, LightningModel

TorchEstimator = LightningEstimator  # Horovod's names in horovod.spark.lightning
TorchModel = LightningModel

__all__ = ["LightningEstimator", "LightningModel", "LocalStore", "Store", "TorchEstimator", "TorchModel"]
