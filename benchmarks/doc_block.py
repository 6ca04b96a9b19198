"""What the benchmarks share: one generated block of a markdown page (the lines between `<!-- name -->` and
`<!-- /name -->` replaced by a benchmark's new table), and matplotlib's pyplot where it imports."""


def replace_block(path, lines):
    """Writes `lines` (a block that starts with its opening marker and ends with its closing one) into `path`
    in place of the old block; appends it when the page has neither marker. A page with only one of them, or
    with them out of order, is an error rather than a page silently duplicated."""
    mark, end = lines[0], lines[-1]
    with open(path) as f:
        text = f.read()
    block = "\n".join(lines)
    if mark not in text and end not in text:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    elif text.count(mark) != 1 or text.count(end) != 1 or text.index(end) < text.index(mark):
        raise SystemExit("%s: expected one %s before one %s; fix the page, then rerun" % (path, mark, end))
    else:
        text = text[:text.index(mark)] + block + text[text.index(end) + len(end):]
    with open(path, "w") as f:
        f.write(text)


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None where matplotlib does not import (the plot is then skipped)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt
