#!/usr/bin/env python3
"""Emulated hosts for tests and benchmarks: network namespaces h1..hN on one bridge (root and iproute2 needed).

    hosts.py up N | down | exec HOST CMD... | link HOST up|down | pids HOST | rate HOST RATE|off

Each host HOST is the netns $NETNS_HOSTS_PREFIX-HOST (default prefix tfr) with address $NETNS_HOSTS_SUBNET.(10+i)
(default subnet 10.231.0) on a veth into a bridge that lives in its own netns, so no traffic leaves those
namespaces. `exec` runs CMD inside HOST with its own hostname (a private UTS namespace: Open MPI tells hosts apart
by hostname); /etc/netns/<netns>/hosts names every host. `ssh` next to this file is the matching ssh stand-in.
`rate` limits both directions of HOST's link with a tbf qdisc (e.g. 1gbit); this kernel has no netem, so links
cannot be given extra delay (their own latency is the veth's, tens of microseconds)."""
import os
import subprocess
import sys
import time

PREFIX = os.environ.get("NETNS_HOSTS_PREFIX", "tfr")
SUBNET = os.environ.get("NETNS_HOSTS_SUBNET", "10.231.0")
BRIDGE = PREFIX + "-br"


def ip(*args, check=True):
    return subprocess.run(["ip"] + list(args), check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def namespaces():
    return [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line.strip()]


def hosts():
    return sorted((n[len(PREFIX) + 1:] for n in namespaces() if n.startswith(PREFIX + "-h")),
                  key=lambda h: int(h[1:]))


def address(host):
    return "%s.%d" % (SUBNET, 10 + int(host[1:]))


def up(n):
    if BRIDGE in namespaces():
        sys.exit("hosts.py: already up (run: hosts.py down)")
    ip("netns", "add", BRIDGE)
    ip("-n", BRIDGE, "link", "set", "lo", "up")
    ip("-n", BRIDGE, "link", "add", "br0", "type", "bridge")
    ip("-n", BRIDGE, "link", "set", "br0", "up")
    names = ["h%d" % i for i in range(1, n + 1)]
    table = "127.0.0.1 localhost\n" + "".join("%s %s\n" % (address(h), h) for h in names)
    for h in names:
        ns = "%s-%s" % (PREFIX, h)
        ip("netns", "add", ns)
        ip("-n", ns, "link", "set", "lo", "up")
        ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", "p-" + h, "netns", BRIDGE)
        ip("-n", BRIDGE, "link", "set", "p-" + h, "master", "br0")
        ip("-n", BRIDGE, "link", "set", "p-" + h, "up")
        ip("-n", ns, "addr", "add", address(h) + "/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        os.makedirs("/etc/netns/" + ns, exist_ok=True)
        with open("/etc/netns/%s/hosts" % ns, "w") as f:
            f.write(table)
    deadline = time.monotonic() + 5  # bridge ports pass traffic only once forwarding
    while time.monotonic() < deadline and ip("-n", BRIDGE, "-d", "link", "show").stdout.count(
            "state forwarding") < n:
        time.sleep(0.1)
    print("up: %s on %s.0/24" % (" ".join(names), SUBNET))


def kill_all(ns):
    for pid in ip("netns", "pids", ns, check=False).stdout.split():
        subprocess.run(["kill", "-9", pid], stderr=subprocess.DEVNULL)


def down():
    for h in hosts():
        kill_all("%s-%s" % (PREFIX, h))
    time.sleep(0.2)
    for h in hosts():
        ns = "%s-%s" % (PREFIX, h)
        ip("netns", "del", ns, check=False)
        subprocess.run(["rm", "-rf", "/etc/netns/" + ns])
    if BRIDGE in namespaces():
        kill_all(BRIDGE)
        ip("netns", "del", BRIDGE, check=False)
    print("down")


def namespace_of(host):
    ns = "%s-%s" % (PREFIX, host)
    if ns not in namespaces():
        sys.exit("hosts.py: no host %r (netns %s)" % (host, ns))
    return ns


def rate(host, value):
    """tbf on HOST's eth0 (what it sends) and on its bridge port (what it receives); 'off' removes both."""
    ns = namespace_of(host)
    for netns, dev in ((ns, "eth0"), (BRIDGE, "p-" + host)):
        ip("-n", netns, "link", "show", dev)  # fails clearly if the link is missing
        subprocess.run(["tc", "-n", netns, "qdisc", "del", "dev", dev, "root"], stderr=subprocess.DEVNULL)
        if value != "off":
            # burst: at least one timer tick of traffic at this rate (tbf drops everything above it otherwise)
            subprocess.run(["tc", "-n", netns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", value, "burst",
                            "4mb", "latency", "100ms"], check=True)


def main(argv):
    cmd, args = (argv[0], argv[1:]) if argv else ("", [])
    if cmd == "up" and len(args) == 1 and args[0].isdigit():
        up(int(args[0]))
    elif cmd == "down":
        down()
    elif cmd == "exec" and len(args) >= 2:
        os.execvp("ip", ["ip", "netns", "exec", namespace_of(args[0]), "unshare", "--uts", "--", "/bin/sh", "-c",
                         'hostname "$0" && exec "$@"', args[0]] + args[1:])
    elif cmd == "link" and len(args) == 2 and args[1] in ("up", "down"):
        namespace_of(args[0])
        ip("-n", BRIDGE, "link", "set", "p-" + args[0], args[1])
    elif cmd == "rate" and len(args) == 2:
        rate(args[0], args[1])
    elif cmd == "pids" and len(args) == 1:
        print(ip("netns", "pids", namespace_of(args[0])).stdout, end="")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
