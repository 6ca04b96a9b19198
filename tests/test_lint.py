"""Style gates the README's test command enforces (tools from the `test` extra): ruff over the Python tree,
clang-format over the C++ tree (configs: pyproject.toml [tool.ruff], .clang-format)."""
import glob
import os
import subprocess
import sys

from conftest import ROOT

BIN = os.path.dirname(sys.executable)


def tool(name):
    path = os.path.join(BIN, name)
    assert os.path.exists(path), "%s is missing: pip install '.[test]'" % name
    return path


def test_ruff():
    proc = subprocess.run([tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout[-5000:]


def test_clang_format():
    files = [f for pattern in ("tfring/cc/**/*.cc", "tfring/cc/**/*.h", "tfring/cc/**/*.cu", "tests/cc/*.cc",
                               "tests/cc/*.h") for f in glob.glob(os.path.join(ROOT, pattern), recursive=True)]
    assert len(files) > 40, files
    proc = subprocess.run([tool("clang-format"), "--dry-run", "-Werror"] + files, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout[-5000:]


def test_api_reference_builds_from_complete_docstrings(tmp_path):
    # docs/build_api.py fails on a public name without a docstring, a parameter missing from Args:, a missing
    # Returns:/Raises:, or any pdoc warning.
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "build_api.py"), "--output-dir", str(tmp_path)],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert os.path.exists(tmp_path / "tfring.html") or os.path.exists(tmp_path / "index.html"), os.listdir(tmp_path)
