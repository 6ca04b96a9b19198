"""Where a slot is: this machine's address on the route to another, the network of that interface (for Open MPI's
*_if_include), and what tells hosts apart."""
import fcntl
import ipaddress
import os
import socket
import struct

from tfring.common import launch_env


def route_address(host):
    """This machine's address on the route to `host` (a UDP connect sends nothing).

    Args:
        host: an address or host name.

    Returns:
        str: the local address (127.0.0.1 when `host` is a loopback address).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), 9))
        return s.getsockname()[0]


def interface_network(address):
    """The network of the interface that holds an address, for Open MPI's *_if_include (which must match on every
    host: one subnet for all hosts, not each host's own address).

    Args:
        address: a local IPv4 address.

    Returns:
        str: e.g. "10.0.0.0/24"; address + "/32" when no interface has it as its primary address.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                if socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, request)[20:24]) != address:  # SIOCGIFADDR
                    continue
                mask = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x891B, request)[20:24])  # SIOCGIFNETMASK
            except OSError:
                continue
            return str(ipaddress.ip_interface("%s/%s" % (address, mask)).network)
    return address + "/32"


def host_identity(index=0):
    """What tells hosts apart: slots with the same identity share one PRRTE host (and its daemon).

    Args:
        index: the slot's index, for $TFRING_SLOT_HOST_ID's "{index}".

    Returns:
        str: $TFRING_SLOT_HOST_ID when set (tests: "h{index}" makes every slot a host of its own), else the host
        name plus the boot id (two containers can share a name).
    """
    if os.environ.get(launch_env.SLOT_HOST_ID):
        return os.environ[launch_env.SLOT_HOST_ID].replace("{index}", str(index))
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return "%s/%s" % (socket.gethostname(), boot)
