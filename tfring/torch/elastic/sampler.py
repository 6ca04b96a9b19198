"""`ElasticSampler` (Horovod's): a torch Sampler that shards a dataset over the ranks of an elastic job, remembers
which indices were processed this epoch and, after a reset, shards only the rest over the new ranks."""
import math
import random

import torch.utils.data

from tfring.torch.mpi_ops import rank, size


def epoch_order(length, shuffle, seed, epoch):
    """Every index of the dataset in the order of one epoch: the same on every rank (seeded by `seed + epoch`).

    Args:
        length: the dataset's length.
        shuffle: whether to shuffle.
        seed: the sampler's seed.
        epoch: the epoch.

    Returns:
        list: the indices 0..length-1, shuffled when `shuffle`.
    """
    order = list(range(length))
    if shuffle:
        random.Random(seed + epoch).shuffle(order)
    return order


def partition(remaining, num_replicas, rank_):
    """One rank's share of `remaining`: every `num_replicas`-th index from position `rank_`, after padding with
    indices from the start so every rank gets as many (as DistributedSampler: equal step counts on all ranks).

    Args:
        remaining: the indices still to process, in epoch order.
        num_replicas: the number of ranks.
        rank_: this rank.

    Returns:
        list: this rank's indices, `ceil(len(remaining) / num_replicas)` of them.
    """
    num_samples = int(math.ceil(len(remaining) / num_replicas))
    padded = list(remaining)
    while remaining and len(padded) < num_samples * num_replicas:  # a loop: the pad may exceed len(remaining)
        padded += remaining[:num_samples * num_replicas - len(padded)]
    return padded[rank_:num_samples * num_replicas:num_replicas]


class ElasticSampler(torch.utils.data.Sampler):
    """Shards a dataset over the current ranks and re-shards what is left of the epoch after a reset.

    Like `DistributedSampler` (shuffled with `seed + epoch`, padded so every rank runs as many batches), but it
    records the processed indices. Give it to `TorchState` as a keyword argument: a commit then keeps the union of
    every rank's processed indices, and after a worker failure or a growth the indices not processed at the last
    commit are sharded over the new set of ranks. Record each batch with `record_batch` (or `record_indices`)
    and call `set_epoch(epoch + 1)` when an epoch is done (it forgets the processed indices).

    Args:
        dataset: the dataset (its length must not change).
        shuffle: whether each epoch is shuffled (default True).
        seed: the shuffling seed, the same on every rank (default 0).

    Raises:
        ValueError: tfring is not initialized (`tfring.torch.init()` comes first).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices = []
        self.indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: its own shuffle, nothing processed yet.

        Call it when an epoch is done (with the next epoch), not when one starts: a reset mid-epoch must keep the
        processed indices.

        Args:
            epoch: the epoch number.
        """
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records batch `batch_idx` of this rank's current pass (batch size `batch_size`) as processed.

        Args:
            batch_idx: the batch's position since the sampler was last iterated (enumerate of the DataLoader).
            batch_size: the DataLoader's batch size.
        """
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        """Records dataset indices as processed.

        Args:
            indices: an iterable of dataset indices.
        """
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx, batch_size):
        """The dataset indices of batch `batch_idx` of this rank's current pass.

        Args:
            batch_idx: the batch's position since the sampler was last iterated.
            batch_size: the DataLoader's batch size.

        Returns:
            list: the indices (fewer than `batch_size` for the last batch).
        """
        start = batch_idx * batch_size
        return self.indices[start:start + batch_size]

    def state_dict(self):
        """What a commit keeps.

        Returns:
            dict: `epoch` and `processed_indices` (a copy).
        """
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state_dict):
        """Takes up a `state_dict()` and re-shards the indices it has not processed over the current ranks.

        Args:
            state_dict: a dict from `state_dict()`.
        """
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def reset(self):
        """Re-shards the unprocessed indices of the epoch over the current ranks (`size()` / `rank()`).

        Raises:
            ValueError: tfring is not initialized.
        """
        self._repartition(size(), rank())

    def _repartition(self, num_replicas, rank_):
        self.num_replicas, self.rank = num_replicas, rank_
        order = epoch_order(len(self.dataset), self.shuffle, self.seed, self.epoch)
        self.remaining_indices = [i for i in order if i not in self.processed_indices]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / num_replicas))
        self.total_size = self.num_samples * num_replicas
        self.indices = partition(self.remaining_indices, num_replicas, rank_)

    def __iter__(self):
        # The shard changes only in reset(): recorded batches take effect at the next commit/restore/sync.
        return iter(list(self.indices))

    def __len__(self):
        return self.num_samples
