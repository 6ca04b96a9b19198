"""Builds tfring's API reference (HTML, with pdoc) from its docstrings, and fails when the docs are incomplete.

    python docs/build_api.py                 # -> build/api/index.html; exit 1 on any problem
    python docs/build_api.py --check-only    # the docstring check alone (no pdoc needed)
    python docs/build_api.py -o DIR

The check covers what users import: `tfring`, `tfring.keras`, `tfring.callbacks`, `tfring.keras.callbacks`
and `tfring.tensorflow.elastic` (process sets, compression, SyncBatchNormalization, the tapes and optimizers are all
exported there). Every public function and class needs a Google-style docstring; one with parameters needs an
`Args:` section naming each of them (a class documents its constructor's), one that returns a value a
`Returns:` section, one whose body raises a `Raises:` section. Public methods a tfring class defines count
too, except overrides of a Keras/TensorFlow base class method (they keep the documented base contract).
pdoc's own warnings (unresolvable names, import errors) fail the build as well. The launcher
(`tfring.runner`) is documented in README.md instead.
"""
import argparse
import contextlib
import ast
import importlib
import importlib.util
import inspect
import os
import pathlib
import re
import sys
import textwrap
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PUBLIC_MODULES = ["tfring", "tfring.keras", "tfring.callbacks", "tfring.keras.callbacks", "tfring.tensorflow.elastic",
                  "tfring.spark", "tfring.ray"]
# Checked where their framework or engine is installed (they build on its classes, e.g. torch.optim, pyspark.ml).
OPTIONAL_MODULES = {"tfring.torch": "torch", "tfring.torch.elastic": "torch", "tfring.jax": "jax",
                    "tfring.spark.keras": "pyspark", "tfring.spark.common": "pyspark",
                    "tfring.spark.torch": "pyspark,torch",
                    "tfring.spark.lightning": "pyspark,torch,lightning"}  # comma: every one of them
CALLBACKS = ["BestModelCheckpoint", "BroadcastGlobalVariablesCallback", "LearningRateScheduleCallback",
             "LearningRateWarmupCallback", "MetricAverageCallback"]
# What the HTML pages of modules without __all__ list (tfring.keras also has everything of tfring's page).
PAGE_MEMBERS = {
    "tfring.keras": ["DistributedOptimizer", "PartialDistributedOptimizer", "allreduce", "allgather", "broadcast",
                     "reducescatter", "broadcast_global_variables", "load_model", "callbacks"],
    "tfring.callbacks": CALLBACKS,
    "tfring.keras.callbacks": CALLBACKS,
}
SECTION = re.compile(r"^(\w[\w ]*):\s*$")
ENTRY = re.compile(r"^(\*{0,2}[\w.]+(?:\s*,\s*\*{0,2}\w+)*)(?:\s*\([^)]*\))?\s*:")


def sections(doc):
    """Maps each Google-style section title (Args, Returns, ...) to the set of names it documents.

    Args:
        doc: a docstring, already dedented (inspect.getdoc).

    Returns:
        dict: {title: set of entry names}; Returns/Raises entries are whatever precedes a colon.
    """
    out, current, indent = {}, None, None
    for line in doc.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        level = len(line) - len(line.lstrip())
        m = SECTION.match(line)
        if m and level == 0:
            current, indent = m.group(1), None
            out[current] = set()
            continue
        if current is None:
            continue
        if level == 0:
            current = None
            continue
        indent = level if indent is None else indent
        if level == indent:
            e = ENTRY.match(stripped)
            if e:  # "a, b: ..." documents both
                out[current].update(n.strip().lstrip("*") for n in e.group(1).split(","))
    return out


def _own_body(node):
    """Statements of a function's body, not those of nested functions, lambdas or classes."""
    todo = list(node.body)
    while todo:
        n = todo.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                todo.append(child)


def body_facts(fn):
    """(returns a value, raises) of a function, from its source.

    Args:
        fn: a Python function.

    Returns:
        tuple: (bool, bool); (False, False) when the source is unavailable.
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False, False
    node = tree.body[0]
    returns = raises = False
    for n in _own_body(node):
        if isinstance(n, ast.Return) and n.value is not None and not (
                isinstance(n.value, ast.Constant) and n.value.value is None):
            returns = True
        if isinstance(n, (ast.Yield, ast.YieldFrom)):
            returns = True
        if isinstance(n, ast.Raise) and n.exc is not None:
            raises = True
    return returns, raises


def named_parameters(fn):
    """Parameter names a docstring must list: all but self/cls and *args/**kwargs.

    Args:
        fn: a function or method.

    Returns:
        list: the names, in signature order.
    """
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.name not in ("self", "cls")
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def check_function(qualname, fn, doc=None, problems=None, extra_doc=""):
    """Appends to `problems` what fn's docstring lacks.

    Args:
        qualname: the name to report.
        fn: the function.
        doc: the docstring to check (default: fn's own).
        problems: the list to append to.
        extra_doc: another docstring that may hold the sections (a class's, for its __init__).
    """
    doc = inspect.getdoc(fn) if doc is None else doc
    if not doc:
        problems.append("%s: no docstring" % qualname)
        return
    found = sections(doc)
    for title, names in sections(extra_doc or "").items():
        found.setdefault(title, set()).update(names)
    params = named_parameters(fn)
    if params:
        args = found.get("Args", found.get("Arguments"))
        if args is None:
            problems.append("%s: no Args: section (parameters %s)" % (qualname, ", ".join(params)))
        else:
            missing = [p for p in params if p not in args]
            if missing:
                problems.append("%s: Args: does not document %s" % (qualname, ", ".join(missing)))
    returns, raises = body_facts(fn)
    if returns and fn.__name__ not in ("__init__", "__new__") and not ({"Returns", "Yields"} & set(found)):
        problems.append("%s: returns a value but has no Returns: section" % qualname)
    if raises and "Raises" not in found:
        problems.append("%s: raises but has no Raises: section" % qualname)


def _is_tfring(obj):
    module = getattr(obj, "__module__", None) or ""
    return (module == "tfring" or module.startswith("tfring.")) and not module.startswith("tfring.runner")


def check_class(qualname, cls, problems, queue):
    """Appends to `problems` what cls's docstrings lack; queues tfring classes it holds as attributes.

    Args:
        qualname: the name to report.
        cls: the class.
        problems: the list to append to.
        queue: list of (qualname, object) still to check.
    """
    doc = cls.__dict__.get("__doc__")
    if not doc:
        problems.append("%s: no docstring" % qualname)
        doc = ""
    doc = inspect.cleandoc(doc)
    init = cls.__dict__.get("__init__")
    if init is not None:
        check_function(qualname + ".__init__", init, inspect.getdoc(init) or "", problems, extra_doc=doc)
    external = [base for base in cls.__mro__[1:] if not _is_tfring(base)]
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if inspect.isclass(member):
            if _is_tfring(member):
                queue.append(("%s.%s" % (qualname, name), member))
            continue
        if any(name in vars(base) for base in external if base is not object):
            continue  # an override: the base class's contract applies
        if isinstance(member, property):
            if not (member.fget.__doc__ or "").strip():
                problems.append("%s.%s: property without a docstring" % (qualname, name))
            continue
        fn = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
        if inspect.isfunction(fn):
            check_function("%s.%s" % (qualname, name), fn, problems=problems)


def public_objects(module):
    """(qualified name, object) of the public functions and classes a public module exports.

    Args:
        module: an imported module.

    Returns:
        list: pairs; names in `__all__` when the module has one, else every public tfring function or class
        it holds.
    """
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    out = []
    for name in names:
        obj = getattr(module, name)
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and _is_tfring(obj):
            out.append(("%s.%s" % (module.__name__, name), obj))
    return out


def check_docstrings():
    """Checks every public function and class of PUBLIC_MODULES.

    Returns:
        list: one line per problem (empty when the docs are complete).
    """
    problems, queue, seen = [], [], set()
    optional = [m for m, engines in OPTIONAL_MODULES.items()
                if all(importlib.util.find_spec(e) is not None for e in engines.split(","))]
    for name in PUBLIC_MODULES + optional:
        module = importlib.import_module(name)
        if not (module.__doc__ or "").strip():
            problems.append("%s: module without a docstring" % name)
        queue.extend(public_objects(module))
    while queue:
        qualname, obj = queue.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if inspect.isclass(obj):
            check_class(qualname, obj, problems, queue)
        else:
            check_function(qualname, obj, problems=problems)
    return problems


def build_html(output_dir):
    """Renders the public modules with pdoc into output_dir.

    Args:
        output_dir: directory for the HTML (created; index.html is the entry page).

    Returns:
        list: pdoc's warnings, as text (each one fails the build).
    """
    import pdoc
    import pdoc.render
    import tfring
    for name in tfring.__all__:  # tfring's names load lazily; pdoc looks in the module's __dict__
        getattr(tfring, name)
    pdoc.render.configure(docformat="google", show_source=False,
                          footer_text="tfring %s" % tfring.__version__)
    for name, names in PAGE_MEMBERS.items():  # pdoc lists a module's __all__; these re-export without one
        module = importlib.import_module(name)
        module.__all__ = names
        for member in names:  # names a module gives on first use (PEP 562 __getattr__): pdoc reads __dict__
            setattr(module, member, getattr(module, member))
    # tfring's __all__ lists one submodule (elastic), so pdoc walks only that one below it; name the others.
    # Left out: private modules and the files the callbacks and the Keras 3 optimizer are defined in (their
    # pages would repeat tfring.callbacks and tfring.keras).
    specs = ["tfring", "tfring.keras", "tfring.callbacks", r"!.*\._", r"!tfring\.callbacks\.",
             r"!tfring\.keras\.optimizer$"]
    if importlib.util.find_spec("tf_keras") is not None:  # the tf_keras wrapper needs tf_keras to import
        specs.append("tfring.tensorflow.tf_keras.optimizer")
    output_dir = pathlib.Path(output_dir).resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    # From the output directory: pdoc warns when a module name is also a path in the cwd (a source checkout's
    # tfring/ next to the installed package), which is not a docs problem.
    with warnings.catch_warnings(record=True) as caught, contextlib.chdir(output_dir):
        warnings.simplefilter("always")
        pdoc.pdoc(*specs, output_directory=output_dir)
    return ["%s:%s: %s" % (w.filename, w.lineno, w.message) for w in caught]


def main(argv=None):
    """Command line: check the docstrings, then build the HTML.

    Args:
        argv: arguments (default: sys.argv[1:]).

    Returns:
        int: the exit status, 0 when the docs are complete and pdoc emitted no warning.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output-dir", default=os.path.join(ROOT, "build", "api"))
    parser.add_argument("--check-only", action="store_true", help="check the docstrings; build no HTML")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    problems = check_docstrings()
    for p in problems:
        print("docstring: " + p)
    if not args.check_only:
        for w in build_html(args.output_dir):
            print("pdoc warning: " + w)
            problems.append(w)
        if os.path.exists(os.path.join(args.output_dir, "index.html")):
            print("API reference: %s" % os.path.join(args.output_dir, "index.html"))
    if problems:
        print("%d problem(s) in the API docs" % len(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
