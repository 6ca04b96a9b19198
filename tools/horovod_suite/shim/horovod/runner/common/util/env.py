"""horovod.runner.common.util.env: rank and size from the launcher's environment (test scaffolding)."""
import os

_PAIRS = [("HOROVOD_RANK", "HOROVOD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
          ("PMI_RANK", "PMI_SIZE")]


def get_env_rank_and_size():
    """(rank, size) from the first launcher variables set, or None outside a launcher."""
    for rank_var, size_var in _PAIRS:
        rank, size = os.environ.get(rank_var), os.environ.get(size_var)
        if rank is not None and size is not None:
            return int(rank), int(size)
        if rank is not None or size is not None:
            raise RuntimeError("only one of %s and %s is set" % (rank_var, size_var))
    return None
