"""The migration engine: parse a script, run the rules, apply their text edits.

A rule is a function `rule(ctx)` that yields `Finding`s. A finding names one construct (line, column, what it is,
what to write instead) and, when the change is mechanical, carries the text edits that make it. Edits are
(start, end, text) on character offsets of the original source; they are applied from the end of the file
backwards, so everything outside them (formatting, comments) stays as it was.
"""
import ast
import collections

Edit = collections.namedtuple("Edit", "start end text")


class Finding(object):
    """One construct: `rule` (a short id), `line`/`col` (1-based), `what` (the construct), `instead` (what to
    write), `edits` (empty when the change needs a person)."""

    def __init__(self, rule, line, col, what, instead, edits=()):
        self.rule, self.line, self.col, self.what, self.instead = rule, line, col, what, instead
        self.edits = list(edits)

    @property
    def fixable(self):
        return bool(self.edits)

    def __repr__(self):
        return "Finding(%r, %d:%d, %r)" % (self.rule, self.line, self.col, self.what)


class Context(object):
    """The parsed script and the helpers rules share: source offsets, import aliases, qualified names."""

    def __init__(self, source, filename="<script>"):
        self.source, self.filename = source, filename
        self.tree = ast.parse(source, filename)
        parts = source.split("\n")  # ast's lines end at \n only (splitlines would also split at \f, \x1c, ...)
        self.lines = [p + "\n" for p in parts[:-1]] + [parts[-1]]
        self._starts = [0]
        for line in self.lines:
            self._starts.append(self._starts[-1] + len(line))
        self.aliases, self.imported = _aliases(self.tree)
        roots = set(self.aliases.values()) | self.imported
        self.uses_keras = any(r.split(".")[0] in ("keras", "tensorflow") or r == "tfring" or r.startswith((
            "horovod.tensorflow", "horovod.keras", "tfring.keras", "tfring.tensorflow")) for r in roots)
        self.parents = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node

    # -- positions ---------------------------------------------------------------------------------------------
    def offset(self, lineno, col):
        """Character offset of (1-based line, UTF-8 byte column), the way ast reports positions."""
        if lineno > len(self.lines):
            return len(self.source)
        line = self.lines[lineno - 1]
        return self._starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "replace"))

    def start(self, node):
        return self.offset(node.lineno, node.col_offset)

    def end(self, node):
        return self.offset(node.end_lineno, node.end_col_offset)

    def text(self, node):
        return self.source[self.start(node):self.end(node)]

    def finding(self, rule, node, what, instead, edits=()):
        col = self.start(node) - self._starts[node.lineno - 1] + 1  # in characters (ast counts UTF-8 bytes)
        return Finding(rule, node.lineno, col, what, instead, edits)

    # -- names ---------------------------------------------------------------------------------------------------
    def qualname(self, node):
        """'keras.optimizers.Adam' for `keras.optimizers.Adam` or `Adam` (from keras.optimizers import Adam);
        None when the expression does not start at an imported name."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id]] + parts[::-1])

    def keras_name(self, node):
        """qualname with TensorFlow's Keras spelled as Keras 3 (`tf.keras.X`, `tf.optimizers.X` -> `keras.X`)."""
        return canonical(self.qualname(node))

    # -- edits ---------------------------------------------------------------------------------------------------
    def replace(self, node, text):
        return Edit(self.start(node), self.end(node), text)

    def comma_after(self, pos, limit):
        """Offset of the first comma at or after `pos` and before `limit`, outside comments (None if none)."""
        i = pos
        while i < limit:
            c = self.source[i]
            if c == "#":
                i = self.source.find("\n", i, limit)
                if i < 0:
                    return None
            elif c == ",":
                return i
            i += 1
        return None

    def remove_args(self, call, nodes):
        """Edits deleting `nodes` (keywords or arguments of `call`) and their commas."""
        items = sorted(call.args + call.keywords, key=self.start)
        gone = {id(n) for n in nodes}
        edits = []
        for i, node in enumerate(items):
            if id(node) not in gone:
                continue
            s, e = self.start(node), self.end(node)
            if i + 1 < len(items):
                c = self.comma_after(e, self.start(items[i + 1]))
                if c is None:
                    return []
                edits.append(self._whole_line(s, c + 1))
                continue
            kept = [n for n in items[:i] if id(n) not in gone]
            if not kept:  # every argument goes: drop up to the closing parenthesis (a trailing comma too)
                c = self.comma_after(e, self.end(call) - 1)
                edits.append(Edit(s, e if c is None else c + 1, ""))
                continue
            c = self.comma_after(self.end(kept[-1]), s)
            if c is None:
                return []
            if "#" in self.source[c:s]:  # keep the comments: drop the comma and the argument only
                edits += [Edit(c, c + 1, ""), self._whole_line(s, e)]
            else:
                edits.append(Edit(c, e, ""))
        return edits

    def _whole_line(self, s, e):
        """Edit deleting [s, e), widened to the whole line (and following blanks) when nothing else is on it."""
        line_start = self.source.rfind("\n", 0, s) + 1
        rest = e
        while rest < len(self.source) and self.source[rest] in " \t":
            rest += 1
        if self.source[line_start:s].strip() == "" and (rest == len(self.source) or self.source[rest] == "\n"):
            return Edit(line_start, min(rest + 1, len(self.source)), "")
        return Edit(s, rest, "")


def canonical(name):
    """Spells TensorFlow's Keras 3 namespaces as `keras` (tf.keras *is* Keras 3 on TF 2.16+)."""
    if name is None:
        return None
    for prefix in ("tensorflow.compat.v1.keras", "tensorflow.compat.v2.keras", "tensorflow.python.keras",
                   "tensorflow.keras", "tensorflow.optimizers"):
        if name == prefix or name.startswith(prefix + "."):
            return ("keras.optimizers" if prefix.endswith("optimizers") else "keras") + name[len(prefix):]
    return name


def _aliases(tree):
    """({local name: dotted name it is bound to}, {modules named by `import` statements}), from every import in the
    file (function bodies too; scopes are not told apart)."""
    aliases, imported = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                imported.add(a.name)
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    root = a.name.split(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for a in node.names:
                if a.name != "*":
                    aliases[a.asname or a.name] = node.module + "." + a.name
    return aliases, imported


def apply_edits(source, edits):
    """Applies edits from the end backwards. Overlapping deletions merge; any other overlap raises ValueError."""
    merged = []
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        last = merged[-1] if merged else None
        if last and (edit.start < last.end or (edit.start == last.end and not edit.text and not last.text)):
            if edit.text or last.text:
                raise ValueError("overlapping edits %r and %r" % (last, edit))
            merged[-1] = Edit(last.start, max(last.end, edit.end), "")
        else:
            merged.append(edit)
    for i in range(len(merged) - 1, -1, -1):
        edit, floor = merged[i], merged[i - 1].end if i else 0
        start, after = edit.start, edit.end
        while after < len(source) and source[after] in " \t":
            after += 1
        if not edit.text and (after == len(source) or source[after] in "\r\n"):
            blank = start
            while blank > floor and source[blank - 1] in " \t":
                blank -= 1
            if blank > 0 and source[blank - 1] != "\n":  # a deletion that ends its line takes the blanks before it
                start = blank
        source = source[:start] + edit.text + source[edit.end:]
    return source


def analyze(source, rules, filename="<script>", ignore=()):
    """Every finding of `rules` in `source`, in source order."""
    ctx = Context(source, filename)
    found = [f for rule in rules for f in rule(ctx) if f.rule not in ignore]
    unique = {}
    for f in found:
        unique.setdefault((f.line, f.col, f.rule, f.what), f)
    return sorted(unique.values(), key=lambda f: (f.line, f.col, f.rule))


def _parses(source, filename):
    try:
        ast.parse(source, filename)
        return True
    except SyntaxError:
        return False


def migrate(source, rules, filename="<script>", ignore=(), rounds=4):
    """(new source, the findings rewritten, the findings left in the new source). A fix whose edits overlap an
    earlier fix's waits for the next round (positions are those of the text it was found in: the original's in the
    first round); a fix after which the script would not parse is not made. The new source always parses."""
    current, fixed = source, []
    for _ in range(rounds):
        accepted, taken = [], []
        for f in analyze(current, rules, filename, ignore):
            if not f.fixable:
                continue
            try:
                apply_edits(current, taken + f.edits)
            except ValueError:
                continue
            taken += f.edits
            accepted.append(f)
        if not accepted:
            break
        candidate = apply_edits(current, taken)
        if not _parses(candidate, filename):  # find the culprits: keep the fixes that parse one at a time
            taken, kept = [], []
            for f in accepted:
                if _parses(apply_edits(current, taken + f.edits), filename):
                    taken += f.edits
                    kept.append(f)
            accepted, candidate = kept, apply_edits(current, taken)
            if not accepted:
                break
        fixed += accepted
        current = candidate
    return current, fixed, analyze(current, rules, filename, ignore)
