"""forward(globals(), "tfring.x", ...): module-level __getattr__/__dir__ (PEP 562) reading from tfring modules
(a target module this tfring does not have is skipped)."""
import importlib


def forward(namespace, *targets):
    """Names not defined in `namespace` are looked up in `targets` (module names), first hit wins."""

    def modules():
        found = []
        for target in targets:
            try:
                found.append(importlib.import_module(target))
            except ModuleNotFoundError as e:
                if e.name != target:  # a target that exists but fails to import is a real error
                    raise
        return found

    def __getattr__(name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        for module in modules():
            try:
                return getattr(module, name)
            except AttributeError:
                pass
        raise AttributeError("horovod shim: %s has no attribute %r (looked in %s)"
                             % (namespace["__name__"], name, ", ".join(targets)))

    def __dir__():
        names = set(namespace)
        for module in modules():
            names.update(getattr(module, "__all__", None) or dir(module))
        return sorted(names)

    namespace["__getattr__"] = __getattr__
    namespace["__dir__"] = __dir__
