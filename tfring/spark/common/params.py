"""Spark ML Params generated from a table, with Horovod's getter/setter names (getNumProc, setEpochs,
getFeatureCols, ...): what tfring's Spark estimators and models share."""
from pyspark.ml.param import Param, Params


def _camel(name):
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def _getter(name, description):
    def get(self):
        return self.getOrDefault(getattr(self, name))
    get.__name__ = get.__qualname__ = "get" + _camel(name)
    get.__doc__ = "The `%s` param: %s.\n\nReturns:\n    The value (or its default).\n" % (name, description)
    return get


def _setter(name, description):
    def set_(self, value):
        return self._set(**{name: value})
    set_.__name__ = set_.__qualname__ = "set" + _camel(name)
    set_.__doc__ = ("Sets the `%s` param: %s.\n\nArgs:\n    value: the new value.\n\nReturns:\n    self.\n"
                    % (name, description))
    return set_


def with_params(table):
    """Class decorator: adds a Param, a getter and a setter per table entry, and `_defaults()`.

    Args:
        table: {name: (description, type converter or None, default)}.

    Returns:
        The decorator.
    """
    def decorate(cls):
        for name, (description, converter, _) in table.items():
            kw = {"typeConverter": converter} if converter else {}
            setattr(cls, name, Param(Params._dummy(), name, description, **kw))
            for accessor in (_getter(name, description), _setter(name, description)):
                if accessor.__name__ not in cls.__dict__:  # a class may define its own
                    setattr(cls, accessor.__name__, accessor)
        cls._param_table = table
        return cls
    return decorate


def set_params(instance, table, kwargs):
    """Sets defaults, then the given values (None means "not given"), as pyspark's keyword_only setParams does.

    Args:
        instance: a Params object whose class went through `with_params(table)`.
        table: the same table.
        kwargs: {name: value}.

    Returns:
        instance.
    """
    instance._setDefault(**{n: d for n, (_, _, d) in table.items()})
    instance._set(**{n: v for n, v in kwargs.items() if v is not None})
    return instance
