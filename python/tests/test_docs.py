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
