"""Host lists in horovodrun's formats: -H host1:2,host2:2 and a hostfile of `host slots=N` lines."""


def parse_hosts(spec):
    """'h1:2,h2' -> [('h1', 2), ('h2', 1)]"""
    hosts = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, slots = item.partition(":")
        if not name or (slots and not slots.isdigit()) or (slots and int(slots) < 1):
            raise ValueError("-H/--hosts: bad entry %r in %r (expected host or host:slots)" % (item, spec))
        hosts.append((name, int(slots) if slots else 1))
    if not hosts:
        raise ValueError("-H/--hosts: no hosts in %r" % spec)
    return hosts


def parse_hostfile(path):
    hosts = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            slots = 1
            for p in parts[1:]:
                key, _, val = p.partition("=")
                if key in ("slots", "max_slots") and val.isdigit():
                    slots = int(val)
                else:
                    raise ValueError("--hostfile %s:%d: cannot parse %r (expected 'host slots=N')" % (path, lineno, p))
            hosts.append((parts[0], slots))
    if not hosts:
        raise ValueError("--hostfile %s: no hosts" % path)
    return hosts
