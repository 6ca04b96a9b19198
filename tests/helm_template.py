"""A renderer for exactly the Go-template subset tfring's Helm chart (helm/tfring) uses, for tests where helm is not
installed. Actions: {{ pipeline }}, {{ if p }} / {{ else }} / {{ end }}, {{ range $v := p }} (dot becomes the
element, $ is the root, as in Go). Operands: .Path, $.Path, $var, "string", integer, (pipeline). Functions: Helm's
toYaml, nindent, indent, quote, b64enc, default, required, int, until, genPrivateKey (a fixed stub: STUB_KEY).
`{{-` / `-}}` trim whitespace as in Go. Anything else raises, so the templates cannot drift outside what is tested;
a missing key raises, as `helm lint --strict` (missingkey=error)."""
import base64
import json
import re

import yaml


class TemplateError(Exception):
    pass


ACTION = re.compile(r"\{\{(- )?(.*?)( -)?\}\}")
TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[()|]|[^\s()|]+')
STUB_KEY = "-----BEGIN EC PRIVATE KEY-----\nTEST-ONLY STUB OF HELM'S genPrivateKey\n-----END EC PRIVATE KEY-----\n"


def _empty(v):
    return v is None or v is False or (not isinstance(v, bool) and v in (0, "")) or v == [] or v == {}


def _to_yaml(v):  # Helm: sigs.k8s.io/yaml, keys sorted, no trailing newline
    return yaml.safe_dump(v, default_flow_style=False, sort_keys=True, width=1 << 30).rstrip("\n").removesuffix(
        "\n...")


def _indent(n, s):
    return " " * n + s.replace("\n", "\n" + " " * n)


def _required(msg, v):
    if v is None or v == "":
        raise TemplateError("required: " + msg)
    return v


FUNCS = {
    "toYaml": _to_yaml, "indent": _indent, "nindent": lambda n, s: "\n" + _indent(n, s),
    "quote": lambda v: json.dumps(_text(v)), "b64enc": lambda s: base64.b64encode(s.encode()).decode(),
    "default": lambda d, v=None: d if _empty(v) else v, "required": _required, "int": int,
    "until": lambda n: list(range(n)), "genPrivateKey": lambda kind: STUB_KEY,
}


def _text(v):  # Go's printing of a value
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (dict, list)):
        raise TemplateError("a map or list printed without toYaml: %r" % (v,))
    return "" if v is None else str(v)


def _parse_pipeline(src):
    """'a b | f (g c)' -> [[a, b], [f, ("sub", [[g, c]])]]: the commands between the pipes, with their operands."""
    stack = [[[]]]
    for tok in TOKEN.findall(src):
        if tok == "(":
            stack.append([[]])
        elif tok == ")" and len(stack) > 1:
            sub = stack.pop()
            stack[-1][-1].append(("sub", sub))
        elif tok == "|":
            stack[-1].append([])
        else:
            stack[-1][-1].append(tok)
    if len(stack) != 1 or not all(stack[0]):
        raise TemplateError("bad pipeline: %s" % src)
    return stack[0]


def _operand(op, dot, scope):
    if isinstance(op, tuple):
        return _run(op[1], dot, scope)
    if op.startswith('"'):
        return json.loads(op)
    if re.fullmatch(r"-?\d+", op):
        return int(op)
    m = re.fullmatch(r"(\$\w*|)((?:\.\w+)*|\.)", op)
    if not m or (not m.group(1) and not m.group(2)):
        raise TemplateError("unsupported operand %r" % op)
    if m.group(1):
        if m.group(1) not in scope:
            raise TemplateError("undefined variable %s" % m.group(1))
        value = scope[m.group(1)]
    else:
        value = dot
    for key in [k for k in m.group(2).split(".") if k]:
        if not isinstance(value, dict) or key not in value:
            raise TemplateError("missing value %s (at %r)" % (op, key))
        value = value[key]
    return value


def _run(commands, dot, scope):
    value, piped = None, False
    for command in commands:
        head = command[0]
        if isinstance(head, str) and head in FUNCS:
            args = [_operand(a, dot, scope) for a in command[1:]] + ([value] if piped else [])
            value = FUNCS[head](*args)
        elif isinstance(head, str) and re.fullmatch(r"[A-Za-z]\w*", head):
            raise TemplateError("function %r is not in the renderer's subset" % head)
        elif len(command) > 1 or piped:
            raise TemplateError("can't give argument to non-function %r" % (head,))
        else:
            value = _operand(head, dot, scope)
        piped = True
    return value


def _compile(text):
    """Template text -> a list of ("text", s), ("expr", pipeline), ("if", None, p, then, else) and
    ("range", $var or None, p, body, [])."""
    pieces, pos = [], 0
    for m in ACTION.finditer(text):
        pieces.append(["text", text[pos:m.start()]])
        if m.group(1):
            pieces[-1][1] = pieces[-1][1].rstrip(" \t\r\n")
        pieces.append(["action", m.group(2).strip(), bool(m.group(3))])
        pos = m.end()
    pieces.append(["text", text[pos:]])
    for i, p in enumerate(pieces):
        if p[0] == "action" and p[2]:
            pieces[i + 1][1] = pieces[i + 1][1].lstrip(" \t\r\n")
        if p[0] == "text" and ("{{" in p[1] or "}}" in p[1]):
            raise TemplateError("unparsed action in %r" % p[1][:80])
    root = ("root", [])
    stack = [(root, root[1])]  # (open node, the list its body goes to)
    for p in pieces:
        word, _, rest = p[1].partition(" ") if p[0] == "action" else ("", "", "")
        if p[0] == "text":
            stack[-1][1].append(("text", p[1]))
        elif word in ("if", "range"):
            m = re.fullmatch(r"(\$\w+) := (.+)", rest) if word == "range" else None
            node = (word, m.group(1) if m else None, _parse_pipeline(m.group(2) if m else rest), [], [])
            stack[-1][1].append(node)
            stack.append((node, node[3]))
        elif p[1] == "else" and stack[-1][0][0] == "if" and stack[-1][1] is stack[-1][0][3]:
            stack[-1] = (stack[-1][0], stack[-1][0][4])
        elif p[1] == "end" and len(stack) > 1:
            stack.pop()
        elif word in ("if", "else", "end", "with", "define", "template", "block", "include", "break", "continue") \
                or p[1].startswith("/*") or "=" in word or ":=" in p[1]:
            raise TemplateError("{{ %s }} is not in the renderer's subset (or out of place)" % p[1])
        else:
            stack[-1][1].append(("expr", _parse_pipeline(p[1])))
    if len(stack) != 1:
        raise TemplateError("missing {{ end }}")
    return root[1]


def _execute(nodes, dot, scope, out):
    for node in nodes:
        if node[0] == "text":
            out.append(node[1])
        elif node[0] == "expr":
            out.append(_text(_run(node[1], dot, scope)))
        elif node[0] == "if":
            _execute(node[3] if not _empty(_run(node[2], dot, scope)) else node[4], dot, scope, out)
        else:
            items = _run(node[2], dot, scope)
            if not isinstance(items, list):
                raise TemplateError("range over a non-list %r" % (items,))
            for item in items:  # dot is the element; a declared variable too
                _execute(node[3], item, dict(scope, **({node[1]: item} if node[1] else {})), out)


def render(text, root):
    out = []
    _execute(_compile(text), root, {"$": root}, out)
    return "".join(out)
