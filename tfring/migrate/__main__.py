"""python -m tfring.migrate [--write] [--diff] SCRIPT...: see tfring/migrate/__init__.py and docs/migrating.md."""
import argparse
import difflib
import io
import os
import shutil
import sys
import tokenize

from tfring.migrate import find, migrate_source

EXIT_CLEAN, EXIT_FOUND, EXIT_ERROR = 0, 1, 2


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m tfring.migrate",
        description="Names every Keras 2 / TF1 / Horovod construct in the scripts that Keras 3 or tfring lacks "
                    "(file:line:col, what it is, what to write instead); --write rewrites the mechanical ones.",
        epilog="Exit status: 0 when nothing is left to change, 1 when constructs were found that were not "
               "rewritten (every finding without --write; those needing a person with it), 2 on an error "
               "(unreadable file, syntax error).")
    p.add_argument("scripts", nargs="+", metavar="SCRIPT", help="Python files to check")
    p.add_argument("--write", action="store_true",
                   help="rewrite the mechanical constructs in place; the original is kept as SCRIPT.bak "
                        "(SCRIPT.bak.1, ... when that exists)")
    p.add_argument("--no-backup", action="store_true", help="with --write: keep no .bak copy")
    p.add_argument("--diff", action="store_true", help="print the rewrite as a unified diff (without --write: "
                                                       "a dry run that changes nothing)")
    p.add_argument("--ignore", action="append", default=[], metavar="RULE",
                   help="leave out findings of RULE (the name in brackets), e.g. --ignore tf1-session; repeatable")
    return p


def _read(path):
    with open(path, "rb") as f:
        raw = f.read()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    return raw.decode(encoding), encoding


def _backup(path):
    candidate, n = path + ".bak", 0
    while os.path.exists(candidate):
        n += 1
        candidate = "%s.bak.%d" % (path, n)
    return candidate


def _line(path, f, fixed=False):
    state = "fixed" if fixed else ("fixable with --write" if f.fixable else "needs a manual change")
    return "%s:%d:%d: [%s] %s -> %s (%s)" % (path, f.line, f.col, f.rule, f.what, f.instead, state)


def run_one(path, args, out):
    """Checks (and with --write rewrites) one file; returns its exit status."""
    try:
        source, encoding = _read(path)
        if not args.write and not args.diff:
            found = find(source, path, set(args.ignore))
        else:
            new, fixed, left = migrate_source(source, path, set(args.ignore))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as e:
        out.write("%s: error: %s\n" % (path, e))
        return EXIT_ERROR
    if not args.write:
        if args.diff:
            out.writelines(difflib.unified_diff(source.splitlines(True), new.splitlines(True), path,
                                                path + " (migrated)"))
            found = find(source, path, set(args.ignore))
        for f in found:
            out.write(_line(path, f) + "\n")
        auto = sum(1 for f in found if f.fixable)
        out.write("%s: %d construct(s) to change, %d of them fixable with --write\n" % (path, len(found), auto)
                  if found else "%s: nothing to change\n" % path)
        return EXIT_FOUND if found else EXIT_CLEAN
    backup = None
    if new != source:
        if not args.no_backup:
            backup = _backup(path)
            shutil.copy2(path, backup)
        with open(path, "w", encoding=encoding, newline="") as f:
            f.write(new)
        if args.diff:
            out.writelines(difflib.unified_diff(source.splitlines(True), new.splitlines(True), backup or path, path))
    for f in fixed:
        out.write(_line(path, f, fixed=True) + "\n")
    for f in left:
        out.write(_line(path, f) + "\n")
    summary = "%s: rewrote %d construct(s)" % (path, len(fixed)) + (" (original kept in %s)" % backup if backup else "")
    out.write(summary + ("; %d left that need a manual change\n" % len(left) if left else "; nothing left\n"))
    return EXIT_FOUND if left else EXIT_CLEAN


def main(argv=None, out=None):
    args = _parser().parse_args(argv)
    out = out or sys.stdout
    status = EXIT_CLEAN
    for path in args.scripts:
        status = max(status, run_one(path, args, out))
    return status


if __name__ == "__main__":
    sys.exit(main())
