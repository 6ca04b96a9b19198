"""horovodrun's --config-file (YAML, read with PyYAML): the whole layout of Horovod 0.28.1's config_parser.

Values fill only what the command line left unset (command-line flags win). Keys tfring has no counterpart for
are ignored with one line each (checks.check: IGNORED, IGNORED_IN_CONFIG); a key outside this layout is refused.
Every error is one line naming the file, the key and the value."""
from tfring.common import knobs
from tfring.runner.flags import LOG_LEVELS, UsageError

# section -> {key: (argparse dest, type)}; type: int, float, bool, str or a tuple of allowed strings. The keys of
# horovodrun's layout that tfring has no knob for; the knob table adds the rest (_add_knob_keys).
SECTIONS = {
    "params": {"torus_allreduce": ("torus_allreduce", bool)},
    "autotune": {"steps_per_sample": ("autotune_steps_per_sample", int),
                 "bayes_opt_max_samples": ("autotune_bayes_opt_max_samples", int),
                 "gaussian_process_noise": ("autotune_gaussian_process_noise", float)},
    "timeline": {},
    "stall_check": {},
    "library_options": {"mpi_threads_disable": ("mpi_threads_disable", bool),
                        "num_nccl_streams": ("num_nccl_streams", int), "thread_affinity": ("thread_affinity", int),
                        "gloo_timeout_seconds": ("gloo_timeout_seconds", int)},
    "logging": {"with_timestamp": ("log_with_timestamp", bool),
                # the config spelling of --log-hide-timestamp (Horovod's own test config uses it)
                "hide_timestamp": ("log_with_timestamp", bool)},  # inverted below
}
INVERTED = {("logging", "hide_timestamp")}


def _add_knob_keys():
    """The knob table's config keys ("section.key", "!" first: inverted), typed as their flags, first in their
    section (horovodrun's order)."""
    added = {section: {} for section in SECTIONS}
    for k in knobs.launcher_knobs():
        if not k.config:
            continue
        section, key = k.config.lstrip("!").split(".")
        typ = tuple(LOG_LEVELS) if k.type == "level" else knobs.flag_type(k)
        added[section][key] = (knobs.dest(k), typ)
        if k.config.startswith("!"):
            INVERTED.add((section, key))
    for section, keys in added.items():
        SECTIONS[section] = {**keys, **SECTIONS[section]}


_add_knob_keys()
# top-level scalar keys: key -> (dest, type)
TOP = {"controller": ("controller", ("gloo", "mpi")), "verbose": ("verbose", (bool, int))}


def _typename(typ):
    if isinstance(typ, tuple) and all(isinstance(t, str) for t in typ):
        return "one of " + ", ".join(typ)
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(typ, "a boolean")


def _convert(value, typ):
    """The value as `typ`, or raises ValueError. bool is not accepted as a number (True is not 1 MB)."""
    if isinstance(typ, tuple) and all(isinstance(t, str) for t in typ):
        if isinstance(value, str) and value.lower() in typ:
            return value.lower()
        raise ValueError
    if typ == (bool, int):
        if isinstance(value, (bool, int)):
            return bool(value)
        raise ValueError
    if typ is bool:
        if isinstance(value, bool):
            return value
        raise ValueError
    if isinstance(value, bool):
        raise ValueError
    if typ is int and isinstance(value, int):
        return value
    if typ is float and isinstance(value, (int, float)):
        return float(value)
    if typ is str and isinstance(value, (str, int, float)):
        return str(value)
    raise ValueError


def read_config_file(path):
    """{dest: (value, 'file: section.key')} from a horovodrun YAML config file; UsageError on any problem."""
    where = "--config-file %s" % path
    try:
        import yaml
    except ImportError:
        raise UsageError("%s: reading config files needs PyYAML (pip install pyyaml)" % where)
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise UsageError("%s: cannot read it: %s" % (where, e.strerror or e))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = " at line %d, column %d" % (mark.line + 1, mark.column + 1) if mark else ""
        raise UsageError("%s: not valid YAML%s: %s" % (where, at, getattr(e, "problem", None) or e))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError("%s: expected a mapping of sections (params:, autotune:, ...), got %r" % (where, data))
    values = {}
    for section, body in data.items():
        if section in TOP:
            dest, typ = TOP[section]
            try:
                values[dest] = (_convert(body, typ), "%s: %s: %r" % (where, section, body))
            except ValueError:
                raise UsageError("%s: %s: %r is not %s" % (where, section, body, _typename(typ)))
            continue
        if section not in SECTIONS:
            raise UsageError("%s: unknown key %r (known: %s)" % (where, section,
                                                                 ", ".join(list(TOP) + list(SECTIONS))))
        if body is None:
            continue  # an empty section
        if not isinstance(body, dict):
            raise UsageError("%s: %s: expected a mapping of keys, got %r" % (where, section, body))
        for key, value in body.items():
            if key not in SECTIONS[section]:
                raise UsageError("%s: unknown key %s.%s (known in %s: %s)" % (
                    where, section, key, section, ", ".join(SECTIONS[section])))
            dest, typ = SECTIONS[section][key]
            if value is None:
                continue  # `key:` with no value: as Horovod, not set
            try:
                value = _convert(value, typ)
            except ValueError:
                raise UsageError("%s: %s.%s: %r is not %s" % (where, section, key, value, _typename(typ)))
            if (section, key) in INVERTED:
                value = not value
            named = "%s: %s.%s: %r" % (where, section, key, body[key])
            if dest in values and values[dest][0] != value:
                raise UsageError("%s contradicts %s" % (named, values[dest][1][len(where) + 2:]))
            values[dest] = (value, named)
    return values


def apply_config_file(args):
    """Fills what the command line left unset (None) from args.config_file; records where each came from."""
    args.origin = {}
    if not args.config_file:
        return args
    for dest, (value, origin) in read_config_file(args.config_file).items():
        if dest == "controller":
            if args.use_gloo or args.use_mpi or args.use_jsrun:
                continue  # a controller flag on the command line wins
            dest, value = ("use_gloo", True) if value == "gloo" else ("use_mpi", True)
        if getattr(args, dest, None) is None:
            setattr(args, dest, value)
            args.origin[dest] = origin
    return args
