"""Docstring blocks that sibling functions share, written once and filled into each `__doc__` at import (as Keras'
optimizers share their argument docs), so help() and the API reference still show every argument in full.

A docstring names a block by a line of its own, `{block}`, indented as the block's lines are to be; the block's
text is unindented (its continuation lines indented relative to its first line). The indentation is taken from
the docstring, not assumed: Python 3.13 dedents docstrings when it compiles them.
"""
import re
import textwrap

_SLOT = re.compile(r"^([ \t]*)\{(\w+)\}[ \t]*$", re.MULTILINE)


def fill_docs(blocks):
    """A decorator that fills named blocks into the docstring of what it decorates.

    Args:
        blocks: {name: text} of the blocks.

    Returns:
        callable: the decorator; it returns the function or class it is given, its `__doc__` filled in. A
        `{name}` line that names no block raises KeyError (at import, where the decorator runs).
    """
    def fill(obj):
        if obj.__doc__:  # None under python -OO
            obj.__doc__ = _SLOT.sub(lambda m: textwrap.indent(blocks[m.group(2)], m.group(1)), obj.__doc__)
        return obj
    return fill
