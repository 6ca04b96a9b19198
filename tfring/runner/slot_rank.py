"""A rank of a slot job (tfring.runner.slots): fetches calls from the driver service, runs them and posts each
result (or traceback) back, until the driver says stop. Persistent ranks serve any number of calls (Ray); Spark's
run() makes one. The function arrives pickled in a signed message: it is unpickled only after the signature check
(tfring.elastic.protocol verifies every reply)."""
import os
import sys
import time
import traceback

SILENCE = 60.0  # seconds the driver may be unreachable before the rank exits


def serve(client, rank, log=sys.stderr):
    """Runs the driver's calls until it says stop.

    Args:
        client: a DriverClient of the driver service.
        rank: this process's world rank.
        log: where a lost driver is reported.

    Returns:
        int: the exit code (0 when told to stop, 1 when the driver was lost).
    """
    from tfring.elastic.protocol import ProtocolError
    from tfring.runner.slots import decode, encode
    seq, heard = 0, time.monotonic()
    while True:
        try:
            reply = client.call("/call", {"rank": rank, "after": seq})
            heard = time.monotonic()
        except ProtocolError as e:
            if time.monotonic() - heard > SILENCE:
                log.write("tfring rank %d: driver lost: %s\n" % (rank, e))
                return 1
            time.sleep(1.0)
            continue
        if reply.get("stop"):
            return 0
        if "seq" not in reply:
            continue  # nothing yet: ask again
        seq = reply["seq"]
        try:
            fn, args, kwargs = decode(reply["fn"])
            ok, value = True, encode(fn(*args, **kwargs))  # a result may be a lambda or a closure
        except BaseException:  # reported to the caller with the traceback (SystemExit and Ctrl-C included)
            ok, value = False, traceback.format_exc()
        heard = time.monotonic()
        while True:
            try:
                client.call("/result", {"rank": rank, "seq": seq, "ok": ok, "value": value})
                break
            except ProtocolError as e:
                if time.monotonic() - heard > SILENCE:
                    log.write("tfring rank %d: cannot report call %d: %s\n" % (rank, seq, e))
                    return 1
                time.sleep(1.0)


def die_with_parent():
    """Linux: this process is killed when its parent (mpirun or the PRRTE daemon) dies. PRRTE starts every rank
    in a session of its own, so a daemon that dies abruptly (its slot's process was killed, taking the output
    pipes with it) would otherwise leave the ranks running, orphaned, whatever they were doing."""
    import ctypes
    import signal
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the call
        os._exit(1)


def main():
    from tfring.elastic.protocol import DriverClient
    from tfring.runner import slots
    die_with_parent()
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    client = DriverClient(os.environ[slots.DRIVER_ENV], os.environ[slots.SECRET_ENV], timeout=30.0,
                          name=slots.SERVICE, max_body=slots.MAX_BODY)
    return serve(client, rank)


if __name__ == "__main__":
    # Run as a script: drop this file's directory (tfring/runner) from sys.path so `tfring` resolves normally.
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
    from tfring import _lib
    _lib.prepare_mpi_environment()
    sys.exit(main())
