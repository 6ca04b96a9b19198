"""Asks the launcher to end a rank that stopped responding where no live rank shares its host (the core's end hook,
census.h): a rank on the same host SIGKILLs a silent one itself, but a rank alone on its machine, or a machine whose
every rank froze, can only be ended from outside. The launcher checks the process is this job's and kills it; MPI
then reports it failed and the survivors recover as after a kill (docs/elastic.md)."""
import sys

from tfring.common import library
from tfring.common.elastic import membership, protocol

_hook = []  # the ctypes callback, kept alive as long as the core may call it


def _ask(rank, host, pid):
    host = host.decode("utf-8", "replace")
    client = membership.client()
    if client is None:
        message = "no elastic launcher to ask"
    else:
        try:
            message = client.call(protocol.END, protocol.end_request(rank, host, pid)).get("message", "")
        except Exception as e:  # noqa: BLE001 - reported; the survivors then fail at the deadline's grace
            message = "cannot ask the launcher: %s" % e
    sys.stderr.write("tfring.elastic: ending rank %d (host %s, pid %d) through the launcher: %s\n" % (
        rank, host, pid, message))
    sys.stderr.flush()


def install(core):
    """Sets the core's end hook to ask this job's launcher (once per process; elastic jobs only)."""
    if not _hook:
        _hook.append(library.END_SILENT_HOOK(_ask))
        core.tfring_set_end_silent_hook(_hook[0])
