"""Host names in an elastic job: which names are this machine, which known name a rank's reported host is, and
the address the driver listens on for the ranks of given hosts."""
import functools
import ipaddress
import socket


@functools.lru_cache(maxsize=1)
def _local_names():  # localhost, 127.0.0.1, the hostname (short and full) and the addresses it resolves to
    hostname = socket.gethostname()
    names = {"localhost", "127.0.0.1", "::1", hostname, hostname.split(".")[0]}
    try:
        names.add(socket.getfqdn())
        names.update(socket.gethostbyname_ex(hostname)[2])
    except OSError:
        pass
    return frozenset(n for n in names if n)


def is_local(name):
    """Whether `name` is this machine."""
    return name in _local_names() or name.startswith("127.")


def _is_ip(name):
    try:
        return bool(ipaddress.ip_address(name))
    except ValueError:
        return False


def canonical_host(name, known):
    """The name the driver books a rank's host under: the discovery's (or -H's) name for the same host. Ranks
    report PMIX_HOSTNAME or socket.gethostname(): this machine's names (localhost, 127.0.0.1, hostname, fqdn) match
    a known name that is local; a short name matches a full one and vice versa.

    Args:
        name: the name a rank reported.
        known: the names the driver knows, in discovery order.

    Returns:
        str: the matching known name, else `name` itself.
    """
    known = list(known)
    if name in known:
        return name
    if is_local(name):
        for k in known:
            if is_local(k):
                return k
    if not _is_ip(name):
        short = name.split(".")[0]
        for k in known:
            if not _is_ip(k) and k.split(".")[0] == short:
                return k
    return name


def bind_address(hosts):
    """The address the driver listens on for the ranks on `hosts`: 127.0.0.1 when every host is this machine, else
    the address of this machine's interface on the route to the first remote host (a UDP connect sends no packet).
    Never 0.0.0.0.

    Raises:
        RuntimeError: no such address can be found.
    """
    remote = [h for h in hosts if not is_local(h)]
    if not remote:
        return "127.0.0.1"
    try:
        target = socket.getaddrinfo(remote[0], None, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0]
    except OSError as e:
        raise RuntimeError("cannot resolve host %s: %s" % (remote[0], e.strerror or e)) from None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))
            address = s.getsockname()[0]
    except OSError as e:
        raise RuntimeError("no route to host %s (%s): %s" % (remote[0], target, e.strerror or e)) from None
    if address in ("", "0.0.0.0"):
        raise RuntimeError("no interface address on the route to host %s (%s)" % (remote[0], target))
    return address
