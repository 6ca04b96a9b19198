"""What the Spark estimator tests share on the driver (never shipped to the ranks): scikit-learn's digits as
DataFrames, one plain-torch process trained on the same rows (the accuracy to compare with), and the held-out
accuracy of a fitted model's transform."""
import numpy as np


def digits_frames(spark):
    """(train DataFrame, held-out DataFrame, (x, y, x_test, y_test) numpy arrays): every 4th row is held out."""
    from sklearn import datasets
    d = datasets.load_digits()
    x = (d.data / 16.0).astype("float32")
    rows = [(i, x[i].tolist(), int(d.target[i]), 1.0) for i in range(len(x))]
    df = spark.createDataFrame(rows, "id long, features array<float>, label long, weight double")
    held = np.arange(len(x)) % 4 == 0
    return df.filter("id % 4 != 0"), df.filter("id % 4 = 0"), (x[~held], d.target[~held], x[held], d.target[held])


def single_process_accuracy(model, lr, epochs, batch, x, y, x_test, y_test):
    """Held-out accuracy of `model` trained with Adam(lr) on one process over every training row, no tfring."""
    import torch
    import torch.nn.functional as F
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    x, y = torch.from_numpy(x), torch.from_numpy(y).long()
    generator = torch.Generator().manual_seed(1)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for i in range(0, len(x) - batch + 1, batch):
            index = order[i:i + batch]
            optimizer.zero_grad()
            F.cross_entropy(model(x[index]), y[index]).backward()
            optimizer.step()
    with torch.no_grad():
        return float((model(torch.from_numpy(x_test)).argmax(1).numpy() == y_test).mean())


def transform_accuracy(model, held_out):
    """(accuracy, pandas frame of id/label/output) of a fitted model's 10-class predictions on every held-out row;
    asserts every row comes back once with 10 outputs."""
    out = model.transform(held_out).select("id", "label", "label__output").toPandas()
    assert len(out) == held_out.count() == len(set(out["id"]))
    logits = np.stack(out["label__output"].to_numpy())
    assert logits.shape == (len(out), 10)
    return float((logits.argmax(axis=1) == out["label"].to_numpy()).mean()), out
