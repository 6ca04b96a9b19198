"""What the launcher tests share: running tfringrun as a user does, and writing a job script."""
import subprocess
import sys
import textwrap

from conftest import ROOT, rank_env


def tfringrun(args, timeout=300, cwd=ROOT, env=None, **kw):
    """`python -m tfring.runner ARGS` with the ranks' environment; stdout and stderr merged."""
    return subprocess.run([sys.executable, "-m", "tfring.runner"] + args, cwd=cwd, env=env or rank_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, **kw)


def script(tmp_path, body, name="job.py"):
    """A job file with `body` (dedented) in tmp_path; its path."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)
