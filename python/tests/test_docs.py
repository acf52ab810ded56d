"""docs/python.md runs as written (issue 31, Done-when 4): every ```python block, in order, in
one interpreter namespace, from a folder that links the repository's experiments/, with matplotlib's Agg backend; mypy checks
the same code against the shipped stub (dpbandits/_native.pyi) and reports a typo."""

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

DOC = ROOT / "docs" / "python.md"


def blocks():
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def execute(keep, monkeypatch, where):
    """Run the blocks for which `keep(code)` holds, in order, in one namespace."""
    import matplotlib

    matplotlib.use("Agg")
    # The blocks read experiments/ (as from the repository root) and write fig4a.png: run them
    # in a scratch folder that links experiments/.
    (where / "experiments").symlink_to(ROOT / "experiments")
    monkeypatch.chdir(where)
    ns = {"__name__": "__main__"}
    ran = 0
    for i, code in enumerate(blocks()):
        if not keep(code):
            continue
        exec(compile(code, f"docs/python.md block {i}", "exec"), ns)
        ran += 1
    return ns, ran


def test_every_block_but_ray_runs_in_order(monkeypatch, tmp_path):
    all_blocks = blocks()
    assert len([b for b in all_blocks if "import ray" in b]) == 1
    ns, ran = execute(lambda code: "import ray" not in code, monkeypatch, tmp_path)
    assert (tmp_path / "fig4a.png").stat().st_size > 0
    assert ran == len(all_blocks) - 1 >= 7
    # The examples' claims hold.
    assert ns["ok"]["verdict"] == "pass" and ns["bad"]["verdict"] == "fail"
    assert ns["kind"].attrs["kind"] == "adac_ucb" and len(ns["runs"]) > 0


@pytest.mark.ray
@pytest.mark.skipif(
    os.environ.get("DPBANDITS_RAY_NETNS") != "1",
    reason="the Ray block runs inside scripts/test's loopback-only network namespace",
)
def test_the_ray_block_runs(monkeypatch, tmp_path):
    """The Ray block, after the blocks that define what it uses (the others ran in the test
    above; running them twice would only cost time)."""
    needed = ("p = dpbandits.Policy", "class Bernoulli", "class EpsGreedy", "import ray")
    _, ran = execute(lambda code: any(n in code for n in needed), monkeypatch, tmp_path)
    assert ran == 4


def test_mypy_passes_on_the_docs_and_catches_a_typo(tmp_path):
    pytest.importorskip("mypy")
    code = "\n".join(blocks())
    (tmp_path / "doc.py").write_text(code)
    (tmp_path / "typo.py").write_text(code + '\np = dpbandits.Policy("ucb1", arms=2)\np.chose()\n')
    # One mypy process for both files (the imports are analysed once).
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
         "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
         str(tmp_path / "doc.py"), str(tmp_path / "typo.py")],
        capture_output=True,
        text=True,
    )
    errors = [l for l in r.stdout.splitlines() if ": error:" in l]
    # Exactly one error, in typo.py: the docs themselves type-check against the stub.
    assert len(errors) == 1, r.stdout + r.stderr
    assert "typo.py" in errors[0] and '"Policy" has no attribute "chose"' in errors[0], errors


def quick(code: str) -> str:
    """The fast CI form of a page run as a script (documented in docs/python.md): the Figure
    4(a) horizon shrunk tenfold, unless DPBANDITS_DOCS_FULL=1."""
    if os.environ.get("DPBANDITS_DOCS_FULL") == "1":
        return code
    return code.replace("horizon=100_000", "horizon=10_000")


def run_script(code, where, name):
    (where / "experiments").symlink_to(ROOT / "experiments")
    script = where / name
    script.write_text(code)
    env = {**os.environ, "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, str(script)], cwd=where, env=env,
                          capture_output=True, text=True, timeout=900)


def test_the_page_runs_as_a_script(tmp_path):
    """Issue 45, Done-when 2: the blocks (Ray aside) concatenated into one script run with
    `python tutorial.py` (the Dask block under its `__main__` guard)."""
    code = "\n".join(b for b in blocks() if "import ray" not in b)
    p = run_script(quick(code), tmp_path, "tutorial.py")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert (tmp_path / "fig4a.png").stat().st_size > 0
    assert "pass" in p.stdout and "fail" in p.stdout   # the audit example's print


def test_the_readme_python_block_runs_as_written(tmp_path):
    readme = (ROOT / "README.md").read_text()
    found = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert len(found) == 1
    p = run_script(quick(found[0]), tmp_path, "readme.py")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert (tmp_path / "results" / "fig4a_py" / "summary.csv").exists()


def test_the_tutorial_extra_installs_what_the_page_imports():
    """Every third-party module the blocks import (Ray aside: its block says `pip install
    ray`) is a dependency of the package or of its `[tutorial]` extra."""
    import ast

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (scripts/test's venv)

    project = tomllib.loads((ROOT / "python" / "pyproject.toml").read_text())["project"]
    dists = project["dependencies"] + project["optional-dependencies"]["tutorial"]
    names = {re.split(r"[\[<>=! ]", d)[0].lower() for d in dists}
    imported = set()
    for b in blocks():
        if "import ray" in b:
            continue
        for node in ast.walk(ast.parse(b)):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m != "dpbandits"}
    assert third_party == {"numpy", "matplotlib", "tqdm", "dask"}, third_party
    assert third_party <= names, (third_party - names, names)
