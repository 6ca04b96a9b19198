"""The one status -> exception rule (tfring.common.errors.status_error), with the codes and the WORKERS_FAILED
text read from the core: in-process, no ranks (the elastic tests show a real worker failure taking this path)."""
import pytest

from tfring.common import errors


def test_codes_come_from_the_core_and_are_distinct():
    names = ["OK", "INVALID_ARGUMENT", "PRECONDITION_ERROR", "ABORTED", "UNKNOWN", "DEADLINE_EXCEEDED",
             "WORKERS_FAILED"]
    codes = [errors.status_code(n) for n in names]
    assert codes[0] == 0 and len(set(codes)) == len(codes), codes
    with pytest.raises(ImportError, match="NO_SUCH_STATUS"):
        errors.status_code("NO_SUCH_STATUS")


class Invalid(ValueError):
    pass


class Other(RuntimeError):
    pass


@pytest.mark.parametrize("name,expected", [("INVALID_ARGUMENT", Invalid),
                                           ("WORKERS_FAILED", errors.HorovodInternalError), ("ABORTED", Other),
                                           ("DEADLINE_EXCEEDED", Other), ("UNKNOWN", Other)])
def test_each_code_maps_to_the_bindings_class(name, expected):
    exc = errors.status_error(errors.status_code(name), "the message", Invalid, Other)
    assert type(exc) is expected and str(exc) == "the message"
    assert errors.is_worker_failure(exc) == (name == "WORKERS_FAILED")


def test_a_framework_error_is_a_worker_failure_by_the_cores_text():
    mark = errors.workers_failed_mark()
    assert mark.startswith("tfring: ") and "worker" in mark
    assert errors.is_worker_failure(RuntimeError(mark + " (MPI_Allreduce: MPI_ERR_PROC_FAILED)"))
    assert not errors.is_worker_failure(RuntimeError("tfring: ranks disagree"))
