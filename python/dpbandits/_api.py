"""The package's API over the compiled core (``dpbandits._native``); ``dpbandits`` re-exports it
(see ``dpbandits/__init__.py`` and its docstring)."""

from __future__ import annotations

import difflib
import io
import json
import os
import re
import warnings as _warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from . import _native
from ._decision import Decision
from ._native import Environment, Policy

__all__ = ["Policy", "Decision", "Environment", "Result", "Saved", "load", "CellError", "DpbanditsWarning", "policy_generator", "run", "kinds", "environments", "RayExecutor", "__version__"]
__version__ = _native.version()


class DpbanditsWarning(UserWarning):
    """A result that is not silently wrong but needs a look: runs that are not independent,
    rewards outside the kinds' range, a Python environment a ``horizon=`` override could not
    rescale, an off-policy estimate the log cannot support. The same text is on the result
    (``Result.warnings``, ``replay(...).attrs["warnings"]``)."""


def _did_you_mean(e: ValueError) -> ValueError:
    """A ``kind = "X": expected one of: a, b, ...`` error with the closest kinds appended."""
    msg = str(e)
    m = re.search(r'kind = "([^"]*)": expected one of: ([^;()]*)', msg)
    if not m or "did you mean" in msg:
        return e
    known = [k.strip() for k in m.group(2).split(",") if k.strip()]
    close = difflib.get_close_matches(m.group(1), known, n=3, cutoff=0.5)
    if not close:
        return e
    out = ValueError(msg + " (did you mean " + " or ".join(f'"{c}"' for c in close) + "?)")
    out.__cause__ = e
    return out


def kinds() -> List[Dict[str, str]]:
    """Every registry kind: ``kind``, ``setting``, ``name`` (paper name), ``parameters`` (each
    parameter with its range and default, the text ``dpbandits list`` prints), ``example`` (the
    example parameters as TOML, the keyword arguments of ``Policy``; empty for a kind whose
    parameters all have defaults) and ``table`` (a complete ``[[policy]]`` table, ``kind`` line
    included, for every kind)."""
    return [
        {
            "kind": k,
            "setting": s,
            "name": n,
            "parameters": p,
            "example": e,
            "table": f'kind = "{k}"\n' + e.strip() + ("\n" if e.strip() else ""),
        }
        for (k, s, n, e, p) in _native.kinds()
    ]


def environments() -> List[Dict[str, str]]:
    """Every registry environment (the ``[env]`` kinds, :class:`Environment`'s ``kind``):
    ``kind``, ``setting``, ``description`` and ``source`` (the Rust file that implements it)."""
    return [
        {"kind": k, "setting": s, "description": d, "source": f}
        for (k, s, d, f) in _native.environments()
    ]


class _Tables:
    """What a run's result and a saved folder share: the notebook display and the plot."""

    name: str

    @property
    def summary(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def _repr_html_(self) -> str:
        s = self.summary
        if "t" in s.columns:
            last = s[s["t"] == s["t"].max()]
        else:
            last = s
        return f"<p><b>dpbandits</b> {self.name}: {len(s)} summary rows</p>" + last.to_html(
            index=False, max_rows=40
        )

    def plot(self, ax: Any = None, band: bool = True, labels: Optional[List[str]] = None) -> Any:
        """Mean cumulative regret against ``t`` per cell, with the 5%-95% band of the runs
        (``q05``/``q95``) when ``band``; log-scaled ``t``. Returns the matplotlib Axes."""
        import matplotlib.pyplot as plt

        s = self.summary
        if "t" not in s.columns:
            raise ValueError("plot: a BAI result has no curve (its summary is per algorithm)")
        if ax is None:
            _fig, ax = plt.subplots()
        for label in labels or list(dict.fromkeys(s["label"])):
            c = s[s["label"] == label]
            if c["mean"].isna().all():
                continue
            ax.plot(c["t"], c["mean"], label=label)
            if band:
                ax.fill_between(c["t"], c["q05"], c["q95"], alpha=0.2)
        ax.set_xscale("log")
        ax.set(xlabel="t", ylabel="cumulative regret (mean, 5%-95% of runs)")
        ax.legend()
        return ax


@dataclass
class Result(_Tables):
    """The result of :func:`run`.

    ``summary``: the tidy summary table (pandas DataFrame; the CLI's ``summary.csv``).
    ``runs``: ``{label: array}``, per cell a ``runs x checkpoints`` float64 array of cumulative
    regret (BAI: ``runs x fields``, see ``columns``); ``frame()`` the same as one long DataFrame.
    ``manifest``: the manifest as a dict. ``save(dir)`` writes the folder the CLI writes
    (:func:`load` reads it back). ``plot()`` draws the curves with bands.
    """

    _outcome: Any
    name: str

    @property
    def summary_csv(self) -> str:
        return self._outcome.summary_csv()

    @property
    def summary(self) -> Any:
        import pandas as pd

        return pd.read_csv(io.StringIO(self.summary_csv), keep_default_na=False, na_values=[""])

    @property
    def runs(self) -> Dict[str, Optional[np.ndarray]]:
        out: Dict[str, Optional[np.ndarray]] = {}
        for label, _kind, values in self._outcome.runs():
            out[label] = values if isinstance(values, np.ndarray) else None
        return out

    @property
    def errors(self) -> Dict[str, str]:
        return {l: v for (l, _k, v) in self._outcome.runs() if isinstance(v, str)}

    @property
    def columns(self) -> List[Union[int, str]]:
        """The checkpoints (regret settings: ints) or BAI outcome fields (str): the columns of
        ``runs``."""
        return [int(c) if c.isdigit() else c for c in self._outcome.columns()]

    def frame(self) -> Any:
        """Every run as a long DataFrame: ``label, kind, run`` and one row per checkpoint ``t``
        with its ``regret`` (BAI: one row per run, a column per outcome field). Failed cells are
        left out (``errors``)."""
        import pandas as pd

        parts = []
        cols = self.columns
        for label, kind, values in self._outcome.runs():
            if not isinstance(values, np.ndarray):
                continue
            df = pd.DataFrame(values, columns=cols)
            df.insert(0, "run", np.arange(len(df)))
            df.insert(0, "kind", kind)
            df.insert(0, "label", label)
            if cols and isinstance(cols[0], int):
                df = df.melt(id_vars=["label", "kind", "run"], var_name="t", value_name="regret")
                df["t"] = df["t"].astype("int64")
            parts.append(df)
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    @property
    def manifest(self) -> Dict[str, Any]:
        return json.loads(self._outcome.manifest_json())

    @property
    def warnings(self) -> List[str]:
        """What the numbers do not show, one sentence each (also issued as
        :class:`DpbanditsWarning` by :func:`run`): runs that drew identical environment streams,
        rewards outside the kinds' range without a declared ``reward_range``, a Python
        environment a ``horizon=`` override could not rescale. Empty: nothing found."""
        return list(self._outcome.warnings)

    @property
    def not_reproducing(self) -> List[str]:
        """Why the folder :meth:`save` writes is not reproduced by its ``experiment.toml`` (a
        Python environment, user policies); empty: ``dpbandits run`` on it reproduces the folder.
        The saved ``experiment.toml`` then starts with a ``# NOT REPRODUCING`` header naming
        why, and ``manifest.json`` carries ``not_reproducing``."""
        return list(self._outcome.not_reproducing)

    def save(self, dir: Union[str, os.PathLike], force: bool = False) -> List[str]:
        """Write the CLI's results folder (journal, manifest, summary.csv, plots) into ``dir``;
        ``force=True`` clears a folder holding another run. A result that its
        ``experiment.toml`` cannot reproduce (:attr:`not_reproducing`) is marked as such."""
        return self._outcome.save(os.fspath(dir), force)


@dataclass
class Saved(_Tables):
    """A results folder read back by :func:`load`: ``summary`` (DataFrame), ``manifest``
    (dict), ``errors`` (the manifest's failed cells), ``plot()``. The per-run values stay in
    the folder's journal (``dpbandits run --resume`` reads it); a saved folder has no ``runs``."""

    folder: str
    name: str
    summary_csv: str
    manifest: Dict[str, Any]

    @property
    def summary(self) -> Any:
        import pandas as pd

        return pd.read_csv(io.StringIO(self.summary_csv), keep_default_na=False, na_values=[""])

    @property
    def errors(self) -> Dict[str, str]:
        errs = self.manifest.get("errors") or {}
        return dict(errs) if isinstance(errs, Mapping) else {}


def load(folder: Union[str, os.PathLike]) -> Saved:
    """Read a results folder written by ``Result.save`` or ``dpbandits run``."""
    d = os.fspath(folder)
    for f in ("summary.csv", "manifest.json"):
        if not os.path.exists(os.path.join(d, f)):
            raise FileNotFoundError(f"folder = {d!r}: no {f} (not a dpbandits results folder)")
    with open(os.path.join(d, "summary.csv"), encoding="utf-8") as f:
        csv = f.read()
    with open(os.path.join(d, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    return Saved(d, str(manifest.get("experiment", os.path.basename(d))), csv, manifest)


def _spec_arg(spec: Union[str, os.PathLike, Mapping[str, Any]]) -> Union[str, Dict[str, Any]]:
    """The spec as TOML text or a dict of the TOML file's structure (a path is read)."""
    if isinstance(spec, Mapping):
        return dict(spec)
    if isinstance(spec, (str, os.PathLike)):
        s = os.fspath(spec)
        if "\n" not in s and (os.path.exists(s) or s.endswith(".toml")):
            with open(s, encoding="utf-8") as f:
                return f.read()
        return s
    raise TypeError(f"spec = {spec!r}: expected a path to a TOML file, TOML text or a dict")


def _label_of(factory: Any) -> str:
    return str(getattr(factory, "label", None) or getattr(factory, "__name__", None) or "user_policy")


def _user_policies(spec: Dict[str, Any], policies: Any) -> List[Tuple[int, str, Any]]:
    """Replace the user policies of ``spec["policy"]`` (a class or callable, or a table with a
    callable ``policy``) by ``{"kind": "python", "label": ...}`` tables, append those of
    ``policies=`` (a dict label -> factory, or a list of factories), and return
    ``[(index, label, factory)]``."""
    got = spec.get("policy") or []
    # One table (a dict, or one factory) is a list of one.
    tables = [got] if isinstance(got, Mapping) or callable(got) else list(got)
    out: List[Tuple[int, str, Any]] = []
    extra: List[Tuple[str, Any]] = []
    if isinstance(policies, Mapping):
        extra = [(str(k), v) for k, v in policies.items()]
    elif policies is not None:
        extra = [(_label_of(f), f) for f in policies]
    for label, f in extra:
        tables.append({"policy": f, "label": label})
    for i, t in enumerate(tables):
        if callable(t) and not isinstance(t, Mapping):
            t = {"policy": t}
        if isinstance(t, Mapping) and "label" in t and t.get("kind", "python") != "python" and not callable(t.get("policy")):
            raise ValueError(
                f"policy[{i}].label = {t['label']!r}: a registry kind takes no label (its label is "
                f"kind(params), e.g. {t.get('kind')}(...), and it keys the kind's random stream "
                "POLICY_RUN: a renamed cell would be another run); drop label, or rename the "
                "column after the run (res.summary.replace(...))"
            )
        if isinstance(t, Mapping) and callable(t.get("policy")):
            rest = set(t) - {"policy", "label", "kind"}
            if rest or t.get("kind", "python") != "python":
                raise ValueError(
                    f"policy[{i}]: a user policy table has policy=, label= (and kind = "
                    f"\"python\"); found {sorted(rest) or t.get('kind')!r}: give parameters to "
                    "the factory (e.g. functools.partial)"
                )
            label = str(t.get("label") or _label_of(t["policy"]))
            out.append((i, label, t["policy"]))
            tables[i] = {"kind": "python", "label": label}
    if tables:
        spec["policy"] = tables
    return out


_DEFAULTS = {"name": "experiment", "master_seed": 0}


def _count_problem(v: Any) -> Optional[str]:
    """Why ``v`` is not a count >= 1 (an int, a numpy integer or an integral float), or None."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return "expected an integer >= 1 (an integral float such as 1e5 is accepted)"
    if not float(v).is_integer() or v < 1:
        return "expected an integer >= 1 (an integral float such as 1e5 is accepted)"
    return None


def _seed_problem(v: Any) -> Optional[str]:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) < 2**64:
        return "expected an integer in [0, 2^64 - 1]"
    return None


def _name_problem(v: Any) -> Optional[str]:
    return None if isinstance(v, str) and v else "expected a non-empty string"


def _with_defaults(
    spec: Dict[str, Any], runs: Any, horizon: Any
) -> Dict[str, Any]:
    """Spec defaults: ``name`` and ``master_seed`` (documented), ``runs`` / ``horizon`` from the
    keyword arguments when the spec has none; every missing or wrong top-level field at once."""
    for k, v in _DEFAULTS.items():
        spec.setdefault(k, v)
    if "runs" not in spec and runs is not None:
        spec["runs"] = runs
    if "horizon" not in spec and horizon is not None:
        spec["horizon"] = horizon
    problems = []
    for k in ("horizon", "runs"):
        if k not in spec:
            problems.append(f"{k}: missing (give it in the spec or as run({k}=...))")
    # Wrong values of the top-level fields, all at once (the Rust parser would stop at the first).
    checks = [("name", spec.get("name"), _name_problem), ("master_seed", spec.get("master_seed"), _seed_problem)]
    for k, kw in (("horizon", horizon), ("runs", runs)):
        if k in spec:
            checks.append((k, spec[k], _count_problem))
        if kw is not None:
            checks.append((k, kw, _count_problem))
    if "env" in spec and not isinstance(spec["env"], Mapping):
        problems.append(f"env = {spec['env']!r}: expected a dict (the [env] table)")
    if spec.get("policy") is not None and not isinstance(spec["policy"], (list, tuple, Mapping)):
        problems.append(f"policy = {spec['policy']!r}: expected a list of [[policy]] tables")
    wrong_types = 0
    for field, value, check in checks:
        msg = check(value)
        if msg:
            problems.append(f"{field} = {value!r}: {msg}")
            wrong_types += not isinstance(value, (int, float, str, np.integer, np.floating)) or (
                isinstance(value, str) != (field == "name")
            )
    if "env" not in spec:
        problems.append("env: missing (an [env] table, or run(env=...) with a Python environment)")
    if not spec.get("policy"):
        problems.append("policy: missing (a list of tables with kind = ..., or user policies)")
    if problems:
        # Only wrong types: a TypeError (as Python's own conversions raise), else a ValueError.
        kind = TypeError if wrong_types == len(problems) else ValueError
        raise kind("spec: " + "; ".join(problems))
    return spec


def policy_generator(master_seed: int, label: str, run: int) -> np.random.Generator:
    """The generator :func:`run` gives the user policy labelled ``label`` in run ``run``:
    ``numpy.random.Generator(PCG64(s))`` with ``s`` derived from ``master_seed`` by the named
    derivations ``POLICY_RUN`` (keyed by the label) and ``POLICY_USER`` (crates/dpbandits/src/rng.rs).
    """
    return np.random.Generator(np.random.PCG64(_native.user_policy_seed(master_seed, label, run)))


class CellError(ValueError):
    """Raised by :func:`run` when a cell failed (``errors="raise"``, the default). ``result`` is
    the :class:`Result` (its ``errors`` holds every failed cell's message)."""

    def __init__(self, message: str, result: "Result"):
        super().__init__(message)
        self.result = result


def _dumps(obj: Any) -> bytes:
    try:
        import cloudpickle  # Ray and Dask ship it: classes defined in a notebook travel too
    except ImportError:  # pragma: no cover
        import pickle

        return pickle.dumps(obj)
    return cloudpickle.dumps(obj)


def _run_shard(
    canonical: str,
    index: int,
    count: int,
    threads: Optional[int],
    user: Optional[bytes] = None,
):
    """One shard of an experiment, run in a worker (Ray task, Dask task, executor job)."""
    import pickle

    policies = pickle.loads(user) if user is not None else None
    exp = _native.Experiment(canonical, policies=policies)
    return exp.run_shard(index, count, threads)


class RayExecutor:
    """A ``concurrent.futures``-style executor over Ray tasks (``ray.init`` first, or pass
    ``address``). Each ``submit`` is one ``ray.remote`` task; ``num_cpus`` per task."""

    def __init__(self, num_cpus: float = 1, **init_kwargs):
        import ray

        if not ray.is_initialized():
            ray.init(**init_kwargs)
        self._ray = ray
        self._num_cpus = num_cpus

    def submit(self, fn, *args, **kwargs):
        remote = self._ray.remote(num_cpus=self._num_cpus)(fn)
        return remote.remote(*args, **kwargs).future()

    def shutdown(self, wait: bool = True):
        pass


def _executor_of(executor):
    if executor is None:
        return None
    mod = getattr(executor, "__name__", "")
    if mod == "ray":  # the ray module itself
        return RayExecutor()
    if hasattr(executor, "submit"):
        return executor
    raise TypeError(
        f"executor = {executor!r}: expected a concurrent.futures.Executor, a dask "
        "distributed.Client, dpbandits.RayExecutor() or the ray module"
    )


def run(
    spec: Union[str, os.PathLike, Mapping[str, Any]],
    runs: Optional[Union[int, float]] = None,
    horizon: Optional[Union[int, float]] = None,
    threads: Optional[int] = None,
    executor: Any = None,
    shards: Optional[int] = None,
    env: Any = None,
    progress: Optional[Callable[[int, int], None]] = None,
    policies: Any = None,
    errors: str = "raise",
) -> Result:
    """Run an experiment: ``spec`` is a TOML path, TOML text or a dict of the file's structure.

    ``runs`` / ``horizon`` override the file (the CLI's ``--runs`` / ``--horizon``).
    ``threads``: rayon workers of this process (default: all cores); the GIL is released while
    Rust simulates. ``progress(done, total)`` is called about every 0.1 s (e.g. a tqdm update).
    ``executor``: shards of jobs (job ``j`` to shard ``j mod shards``, the CLI's ``--shard``)
    are submitted as tasks and merged; the result is byte-identical to the local run.
    ``env``: a Python environment (``means`` or ``means_at(t)``, and ``pull(arm, t)``, optional
    ``pull_sum``, ``reward_range``), or a callable ``make(seed)`` returning one, replacing the
    file's ``[env]`` (finite-armed only).
    ``policies``: user policies (``{label: make}`` or ``[make, ...]``; ``make(arms, rng)``
    returns an object with ``choose()`` and ``observe(arm, reward)``), run next to the spec's
    kinds; a spec's ``policy`` list may also hold them (``{"policy": make, "label": ...}``).
    ``errors``: ``"raise"`` (default: a failed cell raises :class:`CellError`) or
    ``"collect"`` (failed cells are in ``Result.errors``, their status in the summary).
    """
    if errors not in ("raise", "collect"):
        raise ValueError(f"errors = {errors!r}: expected 'raise' or 'collect'")
    text = _spec_arg(spec)
    if isinstance(text, dict):
        user = _user_policies(text, policies)
        if env is not None:
            text.setdefault("env", {"kind": "python"})
        text = _with_defaults(text, runs, horizon)
    else:
        # TOML text: user policies are appended as placeholder tables after the file's own.
        extra: Dict[str, Any] = {"policy": [None] * _native.policy_count(text)}
        user = _user_policies(extra, policies)
        for _i, label, _f in user:
            text += f"\n[[policy]]\nkind = \"python\"\nlabel = {json.dumps(label)}\n"
    try:
        exp = _native.Experiment(text, runs, horizon, env, user or None)
    except ValueError as e:
        raise _did_you_mean(e) from e.__cause__
    ex = _executor_of(executor)
    if ex is None:
        rows = exp.run_shard(0, 1, threads, progress)
    else:
        if exp.python_env:
            raise ValueError(
                "executor: an experiment with a Python env= runs in this process only "
                "(the environment object is not shipped to workers); drop executor="
            )
        n = shards if shards is not None else max(1, min(exp.jobs, 16))
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"shards = {shards!r}: expected an integer >= 1")
        blob = _dumps(user) if user else None
        futures = [ex.submit(_run_shard, exp.canonical, i, n, threads, blob) for i in range(n)]
        rows = []
        for i, f in enumerate(futures):
            rows.extend(f.result())
            if progress is not None:
                progress(len(rows), exp.jobs)
    res = Result(exp.assemble(rows), exp.name)
    for w in res.warnings:
        _warnings.warn(w, DpbanditsWarning, stacklevel=2)
    if errors == "raise" and res.errors:
        failed = "; ".join(f"{k}: {v}" for k, v in res.errors.items())
        raise CellError(
            f"{len(res.errors)} cell(s) failed (run(..., errors='collect') keeps the others): "
            + failed,
            res,
        )
    return res


def _param_text(v: Any) -> str:
    """A parameter value as the CLI's ``--param key=value`` writes it (a TOML value)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, np.integer, np.floating)):
        return repr(float(v)) if isinstance(v, (float, np.floating)) else str(int(v))
    if isinstance(v, str):
        return json.dumps(v)
    raise ValueError(f"params: {v!r}: expected a bool, number or string")


def replay(
    log: Union[str, os.PathLike],
    *,
    format: str = "csv",
    kind: Optional[str] = None,
    params: Optional[Mapping[str, Any]] = None,
    target: Optional[List[float]] = None,
    position: Union[str, int] = "all",
    arms: Optional[int] = None,
    seed: int = 20240917,
    confidence: float = 0.95,
    rejection: str = "auto",
    replays: int = 10,
    switch_tau: float = 100.0,
):
    """Offline evaluation on logged feedback (docs/offline.md): replay, IPS, SNIPS, DR, DM and
    switch-DR, with the log's diagnostics.

    ``log``: a CSV file (``format="csv"``, header ``action,reward,propensity[,x0,...]``) or an
    Open Bandit Dataset campaign folder (``format="obd"``). Evaluates a registry ``kind`` with
    ``params`` (finite-armed or contextual) or a fixed ``target`` (action probabilities).
    Returns a pandas DataFrame, one row per estimator (``estimator, value, lo, hi, events,
    interval, valid, why_invalid``), with the run's counts in ``df.attrs`` (``events``,
    ``accepted``, ``matched``, ``rejection``, ``p_min``, ``policy``, ``diagnostics``: mean
    importance weight with its interval, effective sample size, mass on never-logged actions,
    a context-free log's propensity sum; ``spread``: a kind's replay over ``replays`` seeds;
    ``warnings``): the numbers of ``dpbandits replay`` with the same arguments. Every warning is
    also issued as a :class:`DpbanditsWarning`; an estimate the log cannot support has
    ``valid = False``.
    """
    import pandas as pd

    items = [f"{k}={_param_text(v)}" for k, v in (params or {}).items()]
    if isinstance(replays, bool) or not isinstance(replays, (int, np.integer)) or replays < 1:
        raise ValueError(f"replays = {replays!r}: expected an integer >= 1")
    try:
        text = _native.replay_json(
            os.fspath(log),
            format,
            kind,
            items,
            None if target is None else [float(p) for p in target],
            str(position),
            arms,
            int(seed),
            float(confidence),
            rejection,
            int(replays),
            float(switch_tau),
        )
    except ValueError as e:
        raise _did_you_mean(e) from e.__cause__
    report = json.loads(text)
    df = pd.DataFrame(report.pop("estimates"))
    df.attrs.update(report)
    for w in report["warnings"]:
        _warnings.warn(w, DpbanditsWarning, stacklevel=2)
    return df


__all__.append("replay")


def audit(
    policy: Any,
    *,
    params: Optional[Mapping[str, Any]] = None,
    label: Optional[str] = None,
    runs: int = 4000,
    seed: int = 20240917,
    deltas: Optional[List[float]] = None,
    noise_multiplier: float = 1.0,
    confidence: float = 0.95,
    horizon: Optional[int] = None,
    arms: int = 2,
    scenarios: Optional[List[str]] = None,
    threads: Optional[int] = None,
    frame: bool = False,
) -> Any:
    """The empirical privacy audit (``dpbandits audit``; docs/privacy.md) of a registry kind
    (``policy="adac_ucb", params={"rho": 0.5}``) or of a user policy (``policy=Make``, a
    callable ``make(arms, rng)`` whose ``guarantee`` attribute states the claim, e.g.
    ``{"epsilon": 1.0}``), black-box on its decisions. Returns the CLI's ``--json`` report as a
    dict (``verdict``: ``pass``, ``fail``, or ``inconclusive`` when the design could not have
    refuted the claim, with ``why_inconclusive`` saying what to change (runs, horizon,
    scenario; also issued as a :class:`DpbanditsWarning`); ``eps_lower_bound``, ``claimed``,
    ``results``: one row per scenario and
    delta, ``pandas.DataFrame(report["results"])``). The bound holds with probability
    ``confidence`` over all scenarios at once: a correctly private policy fails with probability
    at most ``1 - confidence``. ``frame=True``: the ``results`` as a pandas DataFrame with the
    rest of the report in ``df.attrs``."""
    if isinstance(policy, str):
        kind, factory = policy, None
        items = [f"{k}={_param_text(v)}" for k, v in (params or {}).items()]
    elif callable(policy):
        if params:
            raise ValueError(
                "params: a user policy takes no params= (give them to its factory, e.g. "
                "functools.partial)"
            )
        kind, factory, items = None, policy, []
        label = label or _label_of(policy)
    else:
        raise TypeError(
            f"policy = {policy!r}: expected a registry kind (str) or a user policy "
            "(a callable make(arms, rng))"
        )
    call = lambda: _native.audit_json(  # noqa: E731
        kind,
        items,
        factory,
        label,
        int(runs),
        int(seed),
        [float(d) for d in (deltas or [])],
        float(noise_multiplier),
        float(confidence),
        None if horizon is None else int(horizon),
        int(arms),
        list(scenarios or []),
        threads,
    )
    try:
        text = call()
    except ValueError as e:
        raise _did_you_mean(e) from e.__cause__
    report = json.loads(text)
    if report["verdict"] == "inconclusive":
        _warnings.warn(
            "audit inconclusive: " + str(report.get("why_inconclusive")), DpbanditsWarning, stacklevel=2
        )
    if frame:
        import pandas as pd

        rows = report.pop("results")
        df = pd.DataFrame(rows)
        df.attrs.update(report)
        return df
    return report


__all__.append("audit")

# The public objects say they live in `dpbandits` (their reprs, pickles and the docs name them
# there; this module is where they are written).
for _name in __all__:
    _obj = globals().get(_name)
    if getattr(_obj, "__module__", None) == __name__:
        try:
            _obj.__module__ = "dpbandits"
        except (AttributeError, TypeError):
            pass
