"""A linear model's PowerSGD training, simulated in float64 numpy for every rank at once (Vogels et al.: P = avg(M Q),
orthonormal P, Q = avg(M^T P), approximation P Q^T, error = M - P Q^T; warm-up steps uncompressed): what the Keras
and JAX DistributedOptimizers' rank tests must end with. The kernel (64 x 96) is compressed, the bias (1-D) is not."""
import numpy as np

B, STEPS, LR = 4, 4, 0.5
IN, OUT = 64, 96


def initial_weights():
    """[kernel, bias], float32, the same on every rank."""
    rng = np.random.default_rng(7)
    return [rng.normal(0, 0.1, (IN, OUT)).astype("float32"), rng.normal(0, 0.1, OUT).astype("float32")]


def batch(step, r):
    """Rank r's (x, y) at a step: every rank can make every other rank's."""
    rng = np.random.default_rng(1000 * step + r)
    return rng.normal(size=(B, IN)).astype("float32"), rng.normal(size=(B, OUT)).astype("float32")


def simulated(config, n, kernel_index=0):
    """[kernel, bias] after STEPS steps of SGD(LR) on the mean squared error, PowerSGD over n ranks (the kernel's
    first Q is that of its position among the gradients, kernel_index)."""
    kernel, bias = (w.astype("float64") for w in initial_weights())
    q = config.initial_q(OUT, kernel_index).astype("float64")
    errors = [0.0] * n
    for step in range(STEPS):
        dks, dbs = [], []
        for r in range(n):
            x, y = (a.astype("float64") for a in batch(step, r))
            e = 2.0 * (x @ kernel + bias - y) / (B * OUT)  # d(mse)/d(prediction)
            dks.append(x.T @ e)
            dbs.append(e.sum(0))
        if step < config.warmup_steps:
            dk = sum(dks) / n
        else:
            ms = [dk + err for dk, err in zip(dks, errors)]
            basis = np.linalg.qr(sum(m @ q for m in ms) / n)[0]
            q = sum(m.T @ basis for m in ms) / n
            dk = basis @ q.T
            errors = [m - dk for m in ms]
        kernel, bias = kernel - LR * dk, bias - LR * sum(dbs) / n
    return [kernel, bias]
