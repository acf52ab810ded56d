"""``python -m dpbandits``: ``list``, ``run`` and ``audit`` without the Rust CLI binary (which
pip does not install). ``python -m dpbandits list``; ``python -m dpbandits run FILE [--runs N]
[--horizon T] [--out DIR]``; ``python -m dpbandits audit KIND [--param k=v ...] [--runs N]
[--seed S] [--json FILE]``."""

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
    report = dpbandits.audit(
        args.kind, params=params, runs=args.runs, seed=args.seed, horizon=args.horizon
    )
    text = json.dumps(report, indent=2)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(f"{report['kind']}: verdict {report['verdict']}, eps lower bound "
          f"{report['eps_lower_bound']:.3g} vs claimed {report['claimed']:.3g}")
    return 0 if report["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
