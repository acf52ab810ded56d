"""``python -m dpbandits``: ``list``, ``run``, ``audit`` and ``replay`` without the Rust CLI
binary (which pip does not install). ``python -m dpbandits list``; ``python -m dpbandits run
FILE [--runs N] [--horizon T] [--out DIR]``; ``python -m dpbandits audit KIND [--param k=v ...]
[--runs N] [--seed S] [--json FILE]`` (exit 0 pass, 1 fail, 4 inconclusive);
``python -m dpbandits replay --log PATH [--format csv|obd] (--kind K [--param k=v ...] |
--target P0,P1,...) [--seed S] [--replays N] [--json FILE]``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

import dpbandits


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dpbandits")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every kind: setting, paper name, example parameters")
    r = sub.add_parser("run", help="run an experiment file")
    r.add_argument("file")
    r.add_argument("--runs", type=float)
    r.add_argument("--horizon", type=float)
    r.add_argument("--out", help="write the CLI's results folder here")
    a = sub.add_parser("audit", help="empirical privacy audit of a private kind")
    a.add_argument("kind")
    a.add_argument("--param", action="append", default=[], help="key=value (repeatable)")
    a.add_argument("--runs", type=int, default=4000)
    a.add_argument("--seed", type=int, default=20240917)
    a.add_argument("--horizon", type=int)
    a.add_argument("--json", help="write the report as JSON to this file")
    rp = sub.add_parser("replay", help="offline evaluation on logged feedback (docs/offline.md)")
    rp.add_argument("--log", required=True)
    rp.add_argument("--format", default="csv")
    rp.add_argument("--kind")
    rp.add_argument("--param", action="append", default=[], help="key=value (repeatable)")
    rp.add_argument("--target", help="fixed action probabilities P0,P1,...")
    rp.add_argument("--position", default="all")
    rp.add_argument("--arms", type=int)
    rp.add_argument("--seed", type=int, default=20240917)
    rp.add_argument("--confidence", type=float, default=0.95)
    rp.add_argument("--rejection", default="auto")
    rp.add_argument("--replays", type=int, default=10)
    rp.add_argument("--switch-tau", type=float, default=100.0)
    rp.add_argument("--json", help="write the report as JSON to this file")
    args = p.parse_args(argv)
    if args.command == "list":
        for k in dpbandits.kinds():
            print(f"{k['kind']:<20} {k['setting']:<13} {k['name']}")
        return 0
    if args.command == "run":
        res = dpbandits.run(args.file, runs=args.runs, horizon=args.horizon, errors="collect")
        if args.out:
            res.save(args.out)
        sys.stdout.write(res.summary_csv)
        return 1 if res.errors else 0
    params = {}
    for item in args.param:
        k, sep, v = item.partition("=")
        if not sep:
            p.error(f"--param {item!r}: expected key=value")
        params[k] = _value(v)
    if args.command == "replay":
        if (args.kind is None) == (args.target is None):
            p.error("replay: give --kind KIND (a registry kind) or --target P0,P1,... (a fixed policy)")
        target = None
        if args.target is not None:
            try:
                target = [float(x) for x in args.target.split(",")]
            except ValueError:
                p.error(f"--target {args.target!r}: expected comma-separated action probabilities, e.g. 0,1,0")
        df = dpbandits.replay(
            args.log, format=args.format, kind=args.kind, params=params or None, target=target,
            position=args.position, arms=args.arms, seed=args.seed, confidence=args.confidence,
            rejection=args.rejection, replays=args.replays, switch_tau=args.switch_tau,
        )
        print(df[["estimator", "value", "lo", "hi", "events", "valid"]].to_string(index=False))
        d = df.attrs["diagnostics"]
        print(f"mean importance weight {d['mean_weight']:.4f} [{d['mean_weight_lo']:.4f}, "
              f"{d['mean_weight_hi']:.4f}], effective sample size {d['ess']:.1f}, "
              f"mass on never-logged actions {d['unsupported_mass']:.4f}")
        for w in df.attrs["warnings"]:
            print(f"warning: {w}")
        if args.json:
            report = dict(df.attrs)
            report["estimates"] = df.to_dict("records")
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(json.dumps(report, indent=2) + "\n")
        return 0
    report = dpbandits.audit(
        args.kind, params=params, runs=args.runs, seed=args.seed, horizon=args.horizon
    )
    text = json.dumps(report, indent=2)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(f"{report['kind']}: verdict {report['verdict']}, eps lower bound "
          f"{report['eps_lower_bound']:.3g} vs claimed {report['claimed']:.3g}")
    if report.get("why_inconclusive"):
        print(f"inconclusive: {report['why_inconclusive']}")
    return {"pass": 0, "fail": 1, "inconclusive": 4}[report["verdict"]]


if __name__ == "__main__":
    sys.exit(main())
