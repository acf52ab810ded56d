#!/usr/bin/env python3
"""Semi-real contextual benchmark: a classification dataset as a contextual bandit (issue 33).

Supervised-to-bandit conversion (Dudik, Langford & Li 2011; Bietti, Agarwal & Langford 2021,
"A Contextual Bandit Bake-off"): one arm per class; each round draws one example (x, y)
uniformly with replacement from the dataset (seeded), shows the policy one action per class,
and pays reward 1 if the chosen class is y, else 0. Regret = number of wrong classes played (the
oracle that knows y gets reward 1 every round).

Encoding (disjoint / one-hot action features): the p features are z-scored over the dataset,
a bias 1 is prepended, and the vector is scaled to unit norm: u = (1, z) / ||(1, z)||. The action
of class c is u placed in block c of a K (p + 1)-dimensional vector (zeros elsewhere), so
d = K (p + 1) and ||a|| = 1, |r| <= 1: Assumption 1 of AdaC-OFUL holds exactly (guaranteed mode,
no clipping ever triggers). The linear reward model is misspecified (as in the bake-off).

Policies: OFUL, RS-OFUL (non-private references) and AdaC-OFUL (rho-zCDP, central) at each rho,
all on the same draws (common random numbers), each driven through `dpbandits session` (the
core's online session, one JSON line per call). LinUCB is a linear-bandit kind here (fixed action
set), not a contextual one, so it is not in this benchmark.

Usage: experiments/semireal/classification.py DATASET [--data DIR] [--bin PATH]
    [--horizon T] [--runs N] [--rho R ...] [--out DIR]
DATASET in iris, wine, breast_cancer. DIR defaults to the output of scripts/fetch-sklearn-data.
Writes OUT/DATASET.csv (per policy and checkpoint: mean and s.e. of the regret over runs) and
OUT/DATASET_summary.csv (dataset, policy, rho, regret at T, price of privacy).
"""
import argparse, csv, json, math, os, random, subprocess, sys

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def svg_lines(path, title, xlabel, ylabel, series, logx=False):
    """A plain SVG line plot (no plotting dependency): series = [(label, [(x, y)])]."""
    W, H, L, R, T, B = 640, 400, 70, 190, 40, 50
    tx = (lambda x: math.log10(x)) if logx else (lambda x: x)
    xs = [tx(x) for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts] + [0.0]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = y1 if y1 > y0 else y0 + 1
    X = lambda x: L + (tx(x) - x0) / (x1 - x0) * (W - L - R)
    Y = lambda y: H - B - (y - y0) / (y1 - y0) * (H - T - B)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
         f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
         f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">{xlabel}</text>',
         f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 16 {(T + H - B) / 2})">{ylabel}</text>']
    for i in range(5):
        yv = y0 + (y1 - y0) * i / 4
        o.append(f'<text x="{L - 6}" y="{Y(yv) + 4:.1f}" text-anchor="end">{yv:.3g}</text>')
        xv = x0 + (x1 - x0) * i / 4
        lab = f"{10 ** xv:.3g}" if logx else f"{xv:.3g}"
        o.append(f'<text x="{L + (xv - x0) / (x1 - x0) * (W - L - R):.1f}" y="{H - B + 16}" text-anchor="middle">{lab}</text>')
    for n, (label, pts) in enumerate(series):
        c = COLORS[n % len(COLORS)]
        d = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in pts)
        o.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{d}"/>')
        o += [f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="2.5" fill="{c}"/>' for x, y in pts]
        o.append(f'<text x="{W - R + 10}" y="{T + 16 * n + 10}" fill="{c}">{label}</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


FILES = {"iris": "iris.csv", "wine": "wine_data.csv", "breast_cancer": "breast_cancer.csv"}


def load(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    n, p = int(rows[0][0]), int(rows[0][1])
    classes = rows[0][2:]
    xs = [[float(v) for v in r[:p]] for r in rows[1 : n + 1]]
    ys = [int(r[p]) for r in rows[1 : n + 1]]
    assert len(xs) == n and all(0 <= y < len(classes) for y in ys), path
    return xs, ys, len(classes)


def encode(xs, k):
    p = len(xs[0])
    mu = [sum(x[j] for x in xs) / len(xs) for j in range(p)]
    sd = [math.sqrt(sum((x[j] - mu[j]) ** 2 for x in xs) / len(xs)) or 1.0 for j in range(p)]
    out = []
    for x in xs:
        u = [1.0] + [(x[j] - mu[j]) / sd[j] for j in range(p)]
        nu = math.sqrt(sum(v * v for v in u))
        u = [v / nu for v in u]
        acts = []
        for c in range(k):
            a = [0.0] * (k * (p + 1))
            a[c * (p + 1) : (c + 1) * (p + 1)] = u
            acts.append(a)
        out.append(acts)
    return out, k * (p + 1)


def session(binary, kind, d, horizon, seed, rho=None):
    args = [binary, "session", "--kind", kind, "--param", f"dim={d}", "--param",
            f"horizon={horizon}", "--seed", str(seed)]
    if rho is not None:
        args += ["--param", f"rho={rho}"]
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)


def call(proc, msg):
    proc.stdin.write(json.dumps(msg) + "\n")
    line = proc.stdout.readline()
    if not line:
        sys.exit(f"dpbandits session exited (args {proc.args})")
    out = json.loads(line)
    if "error" in out:
        sys.exit(f"dpbandits session: {out['error']}")
    return out


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--plot-pop":
        return plot_pop(sys.argv[2], sys.argv[3:])
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", choices=sorted(FILES))
    ap.add_argument("--data")
    ap.add_argument("--bin", default=os.environ.get("DPBANDITS_BIN", "target/release/dpbandits"))
    ap.add_argument("--horizon", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rho", type=float, nargs="*", default=[0.1, 1.0, 10.0, 100.0])
    ap.add_argument("--seed", type=int, default=20261126)
    ap.add_argument("--out", default="target/semireal")
    a = ap.parse_args()
    data = a.data or subprocess.check_output(["scripts/fetch-sklearn-data"], text=True).strip()
    xs, ys, k = load(os.path.join(data, FILES[a.dataset]))
    acts, d = encode(xs, k)
    pols = [("oful", None), ("rs_oful", None)] + [("adac_oful", r) for r in a.rho]
    labels = [kd if r is None else f"adac_oful(rho={r:g})" for kd, r in pols]
    checkpoints = sorted({max(1, a.horizon * i // 20) for i in range(1, 21)})
    curves = {l: {t: [] for t in checkpoints} for l in labels}
    for run in range(a.runs):
        rng = random.Random(a.seed * 1000 + run)  # the run's draws, shared by every policy
        procs = [session(a.bin, kd, d, a.horizon, a.seed * 1000 + run * 97 + m, r)
                 for m, (kd, r) in enumerate(pols)]
        regret = [0] * len(pols)
        for t in range(1, a.horizon + 1):
            i = rng.randrange(len(xs))
            for m, pr in enumerate(procs):
                arm = call(pr, {"decide": acts[i]})["arm"]
                reward = 1.0 if arm == ys[i] else 0.0
                call(pr, {"observe": [arm, reward]})
                regret[m] += 1 - int(reward)
            if t in curves[labels[0]]:
                for m, l in enumerate(labels):
                    curves[l][t].append(regret[m])
        for pr in procs:
            pr.stdin.close()
            pr.wait()
    os.makedirs(a.out, exist_ok=True)
    stat = lambda v: (sum(v) / len(v), (math.sqrt(sum((x - sum(v) / len(v)) ** 2 for x in v) / (len(v) - 1) / len(v)) if len(v) > 1 else float("nan")))
    with open(os.path.join(a.out, f"{a.dataset}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dataset", "policy", "t", "regret_mean", "regret_se"])
        for l in labels:
            for t in checkpoints:
                m, s = stat(curves[l][t])
                w.writerow([a.dataset, l, t, f"{m:.4f}", f"{s:.4f}"])
    svg_lines(os.path.join(a.out, f"{a.dataset}_regret.svg"),
              f"{a.dataset} (K = {k}, d = {d}): regret (wrong classes), mean of {a.runs} runs",
              "round t", "regret", [(l, [(t, stat(curves[l][t])[0]) for t in checkpoints]) for l in labels])
    T = checkpoints[-1]
    base = stat(curves["rs_oful"][T])[0]
    with open(os.path.join(a.out, f"{a.dataset}_summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dataset", "n", "K", "d", "T", "runs", "policy", "rho", "regret_mean", "regret_se",
                    "accuracy", "pop_gap_vs_rs_oful", "pop_ratio_vs_rs_oful"])
        for (kd, r), l in zip(pols, labels):
            m, s = stat(curves[l][T])
            w.writerow([a.dataset, len(xs), k, d, T, a.runs, kd, "" if r is None else f"{r:g}",
                        f"{m:.2f}", f"{s:.2f}", f"{1 - m / T:.4f}",
                        f"{m - base:.2f}" if kd == "adac_oful" else "",
                        f"{m / base:.3f}" if kd == "adac_oful" and base > 0 else ""])
    print(open(os.path.join(a.out, f"{a.dataset}_summary.csv")).read(), end="")


def plot_pop(out, datasets):
    """`--plot-pop OUT DATASET...`: price of privacy (regret ratio to RS-OFUL at T) against rho."""
    series = []
    for ds in datasets:
        with open(os.path.join(out, f"{ds}_summary.csv")) as f:
            rows = [r for r in csv.DictReader(f) if r["policy"] == "adac_oful"]
        series.append((ds, [(float(r["rho"]), float(r["pop_ratio_vs_rs_oful"])) for r in rows]))
    svg_lines(os.path.join(out, "pop_vs_rho.svg"), "AdaC-OFUL regret / RS-OFUL regret at T",
              "rho (zCDP)", "price of privacy (ratio)", series, logx=True)


if __name__ == "__main__":
    main()
