"""PyTorch on Spark DataFrames with tfring, as `horovod.spark.torch`.

    from tfring.spark.torch import TorchEstimator
    est = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.Adam(model.parameters(), 1e-3),
                         loss=lambda out, y: torch.nn.functional.cross_entropy(out, y.long()),
                         feature_cols=["features"], label_cols=["label"], batch_size=32, epochs=5)
    torch_model = est.fit(train_df)                    # a TorchModel (Spark ML Model)
    predictions = torch_model.transform(test_df)       # adds "label__output"
"""
from tfring.spark.common.store import LocalStore, Store
from tfring.spark.torch.estimator import TorchEstimator, TorchModel

__all__ = ["LocalStore", "Store", "TorchEstimator", "TorchModel"]
