"""The launcher <-> rank contract: every TFRING_* variable a launcher (tfringrun, the elastic driver, the Spark/Ray
slot launcher) sets for the ranks it starts, named once. The launcher writes them, the ranks read them."""
import os

# Elastic jobs (tfringrun --min-np/--max-np/--host-discovery-script; tfring.common.elastic reads them).
ELASTIC = "TFRING_ELASTIC"                          # "1": this rank runs in an elastic job
ELASTIC_DRIVER = "TFRING_ELASTIC_DRIVER"            # "host:port" of the launcher's signed service
ELASTIC_SECRET = "TFRING_ELASTIC_SECRET"            # the job's secret (hex); forwarded by name, never on a command line
ELASTIC_DRIVERS = "TFRING_ELASTIC_DRIVERS"          # JSON {host: "host:port"}: the service's address per added host
ELASTIC_MIN_NP = "TFRING_ELASTIC_MIN_NP"            # --min-np
ELASTIC_MAX_NP = "TFRING_ELASTIC_MAX_NP"            # --max-np (0: no maximum)
ELASTIC_TIMEOUT = "TFRING_ELASTIC_TIMEOUT"          # --elastic-timeout, seconds (a knob too: the table's row)
ELASTIC_RESET_LIMIT = "TFRING_ELASTIC_RESET_LIMIT"  # --reset-limit (-1: none)
ELASTIC_COMMAND = "TFRING_ELASTIC_COMMAND"          # JSON argv new ranks run (MPI_Comm_spawn)
ELASTIC_DISCOVERY = "TFRING_ELASTIC_DISCOVERY"      # "1": hosts may come (commits also go to disk)
ELASTIC_STATE_DIR = "TFRING_ELASTIC_STATE_DIR"      # the launcher's private directory for committed state
ELASTIC_RESTART = "TFRING_ELASTIC_RESTART"          # "1": ranks of a restarted job load the last commit
ELASTIC_LAUNCH = "TFRING_ELASTIC_LAUNCH"            # the launcher's count of its mpirun runs (start/exit reports)

# The Spark/Ray slot launcher (tfring.runner.slots).
SLOT_DRIVER = "TFRING_SLOT_DRIVER"    # "host:port" of the slot driver service
SLOT_SECRET = "TFRING_SLOT_SECRET"    # the job's secret: in environments only, forwarded by name
SLOT_HOSTS = "TFRING_SLOT_HOSTS"      # JSON {made-up host name: task service "host:port"}, for the agent
SLOT_MAP = "TFRING_SLOT_MAP"          # JSON [[[slot index, pid, start time], ...] per host], for the watchdogs
SLOT_INDEX = "TFRING_SLOT_INDEX"      # the slot this rank belongs to
SLOT_ASSIGN = "TFRING_SLOT_ASSIGN"    # elastic slot jobs: JSON {host: {"anchor": [pid, start], "slots": [[index,
#                                       pid, start], ...] by local rank}} (spawned: its host only), for the watchdogs
SLOT_HOST_ID = "TFRING_SLOT_HOST_ID"  # tests: a made-up host id per slot ("{index}" replaced)

# tfringrun --metrics-port: the bearer token of rank 0's Prometheus endpoint (tfring.common.metrics_endpoint), read
# from (or written to) --metrics-token-file by the launcher; forwarded by name, never on a command line.
METRICS_TOKEN = "TFRING_METRICS_TOKEN"


def elastic_enabled(environ=None):
    """Whether this process runs in an elastic job (TFRING_ELASTIC=1)."""
    return (os.environ if environ is None else environ).get(ELASTIC) == "1"


def int_value(name, default, environ=None):
    """An integer variable of the contract, `default` when unset or empty."""
    value = (os.environ if environ is None else environ).get(name)
    return int(value) if value not in (None, "") else default
