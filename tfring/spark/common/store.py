"""Where a Spark estimator keeps its intermediate Parquet data, checkpoints and logs (Horovod's Store).

Only local (or shared, e.g. NFS-mounted) filesystem paths: every Spark executor that runs a rank must see the
same path. Horovod's HDFSStore/DBFSLocalStore and fsspec URLs are not supported.
"""
import os

import pyarrow.fs

from tfring.common.docstrings import fill_docs

_FILE_SCHEME = "file://"

# The training and validation data paths take the same dataset index; documented once ("{indexed_path}").
_shared_docs = fill_docs({"indexed_path": """Args:
    idx: a dataset index (the estimator passes its run id), appended as `.<idx>`.

Returns:
    str: the path."""})


def _indexed(path, idx):
    return path if idx is None else "%s.%s" % (path, idx)


class Store:
    """Base class of the stores: paths of the training data, validation data and runs.

    Create one with `Store.create(path)` (a `LocalStore`) or `LocalStore(path)` directly.
    """

    @staticmethod
    def create(prefix_path):
        """The store for a path, as Horovod's `Store.create`.

        Args:
            prefix_path: a local or shared filesystem directory, optionally as a `file://` URL.

        Returns:
            A `LocalStore` rooted at `prefix_path`.

        Raises:
            ValueError: `prefix_path` is another filesystem's URL (hdfs://, s3://, dbfs:/, ...).
        """
        if not isinstance(prefix_path, str) or not prefix_path:
            raise ValueError("Store.create: prefix_path must be a non-empty path, got %r" % (prefix_path,))
        if "://" in prefix_path and not prefix_path.startswith(_FILE_SCHEME) or prefix_path.startswith("dbfs:"):
            raise ValueError("Store.create: prefix_path=%r: only local or shared filesystem paths (or file://) "
                             "are supported by tfring, not HDFS/DBFS/object stores" % prefix_path)
        return LocalStore(prefix_path)


class LocalStore(Store):
    """A store under a directory of the local (or a shared) filesystem.

    Layout: `<prefix>/train_data.<run_id>/`, `<prefix>/val_data.<run_id>/` (Parquet written by Spark),
    `<prefix>/runs/<run_id>/checkpoint.keras` (rank 0's model after every epoch) and
    `<prefix>/runs/<run_id>/logs/`.

    Args:
        prefix_path: the directory (created when needed); a `file://` prefix is accepted.
        train_path: the training data's directory prefix (default `<prefix>/train_data`).
        val_path: the validation data's directory prefix (default `<prefix>/val_data`).
        runs_path: where the runs go (default `<prefix>/runs`).
    """

    def __init__(self, prefix_path, train_path=None, val_path=None, runs_path=None):
        if prefix_path.startswith(_FILE_SCHEME):
            prefix_path = prefix_path[len(_FILE_SCHEME):]
        self.prefix_path = os.path.abspath(prefix_path)
        self._train_path = train_path or os.path.join(self.prefix_path, "train_data")
        self._val_path = val_path or os.path.join(self.prefix_path, "val_data")
        self._runs_path = runs_path or os.path.join(self.prefix_path, "runs")
        self._fs = pyarrow.fs.LocalFileSystem()

    def get_filesystem(self):
        """The pyarrow filesystem the paths are on.

        Returns:
            pyarrow.fs.LocalFileSystem.
        """
        return self._fs

    @_shared_docs
    def get_train_data_path(self, idx=None):
        """Directory of the training data's Parquet files.

        {indexed_path}
        """
        return _indexed(self._train_path, idx)

    @_shared_docs
    def get_val_data_path(self, idx=None):
        """Directory of the validation data's Parquet files.

        {indexed_path}
        """
        return _indexed(self._val_path, idx)

    def get_runs_path(self):
        """Directory holding one subdirectory per run.

        Returns:
            str: the path.
        """
        return self._runs_path

    def get_run_path(self, run_id):
        """Directory of one run.

        Args:
            run_id: the run's id.

        Returns:
            str: the path.
        """
        return os.path.join(self._runs_path, run_id)

    def get_checkpoint_filename(self):
        """File name of a run's checkpoint.

        Returns:
            str: "checkpoint.keras".
        """
        return "checkpoint.keras"

    def get_checkpoint_path(self, run_id):
        """Rank 0's model (Keras format) after the latest epoch of a run.

        Args:
            run_id: the run's id.

        Returns:
            str: the path.
        """
        return os.path.join(self.get_run_path(run_id), self.get_checkpoint_filename())

    def get_logs_path(self, run_id):
        """Directory for a run's logs (where a TensorBoard callback is pointed).

        Args:
            run_id: the run's id.

        Returns:
            str: the path.
        """
        return os.path.join(self.get_run_path(run_id), "logs")

    def to_url(self, path):
        """The `file://` URL of a path, for Spark (whose default filesystem may be HDFS).

        Args:
            path: an absolute path of this store.

        Returns:
            str: the URL.
        """
        return _FILE_SCHEME + path

    def exists(self, path):
        """Whether a file or directory exists.

        Args:
            path: the path.

        Returns:
            bool.
        """
        return self._fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound

    def read(self, path):
        """A file's bytes.

        Args:
            path: the path.

        Returns:
            bytes.
        """
        with self._fs.open_input_stream(path) as f:
            return f.read()
