"""Regenerate the result tables of docs/bai.md from a BAI summary.csv.

Usage: python3 docs/bai_results/tables.py docs/bai_results/mu1_summary.csv

Prints (Markdown): one row per eps with, per configuration, the mean (median) stopping time,
x the ratio to T*_eps ln(1/delta), and errors/runs; the non-private rows; and the ratio table
(DP-TT(joint) against the other algorithms, with two standard errors of the ratio of means by the
delta method for independent runs).
"""
import csv
import math
import sys


def sci(x):
    s = f"{x:.3g}"
    if "e" in s:
        m, e = s.split("e")
        return f"{m}e{e[0]}{e[1:].lstrip('0') or '0'}"
    return s


def key(r):
    lab = r["label"]
    fe = "c16" if "*16" in lab else "c1"
    if r["algorithm"] == "dp_se_bai":
        return "dp_se_bai"
    return f"{r['algorithm']}:{r['threshold']}:{fe}"


def main(path):
    rows = list(csv.DictReader(open(path)))
    for r in rows:
        # The tidy summary (issue 15) names the algorithm `kind` and leaves `epsilon` empty for
        # non-private algorithms; older files say `algorithm` and `inf`.
        r.setdefault("algorithm", r.get("kind"))
        if not r.get("epsilon"):
            r["epsilon"] = "inf"
    private = [r for r in rows if r["epsilon"] != "inf"]
    public = [r for r in rows if r["epsilon"] == "inf"]
    cols = []
    for r in private:
        if key(r) not in cols:
            cols.append(key(r))
    eps = []
    for r in private:
        if r["epsilon"] not in eps:
            eps.append(r["epsilon"])
    cell = {(key(r), r["epsilon"]): r for r in private}
    print("| eps | T*_eps ln(1/δ) | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for e in eps:
        lb = float(next(r for r in private if r["epsilon"] == e)["lower_bound"])
        out = [f"{float(e):.3g}", sci(lb)]
        for c in cols:
            r = cell.get((c, e))
            if r is None:
                out.append("")
                continue
            out.append(
                f"{sci(float(r['mean_tau']))} ({sci(float(r['median_tau']))}) "
                f"×{float(r['ratio_to_lower_bound']):.1f}; {r['errors']}/{r['runs']}"
                + (f", {r['capped']} capped" if r["capped"] != "0" else "")
            )
        print("| " + " | ".join(out) + " |")
    print()
    for r in public:
        print(
            f"* `{r['label']}`: mean {sci(float(r['mean_tau']))}, median "
            f"{sci(float(r['median_tau']))}, ratio to T*_KL ln(1/δ) = "
            f"{float(r['ratio_to_lower_bound']):.2f}, errors {r['errors']}/{r['runs']} "
            f"(95% upper bound {float(r['error_upper95']):.4f})"
        )
    print()
    ref = "dp_tt:joint:c16"
    eb = next((r for r in public if "threshold=r" in r["label"]), None)

    def ratio(a, b):
        ma, mb = float(a["mean_tau"]), float(b["mean_tau"])
        sa, sb = float(a["sem_tau"]), float(b["sem_tau"])
        q = ma / mb
        return q, 2 * q * math.sqrt((sa / ma) ** 2 + (sb / mb) ** 2)

    # (column title, denominator, with 2 se, numerator)
    others = [
        ("DP-TT(joint) / AdaP-TT(thesis), c=16 (± 2 se)", "adap_tt:thesis:c16", True, ref),
        ("same, c=1", "adap_tt:thesis:c1", False, "dp_tt:joint:c1"),
        ("DP-TT(joint) / AdaP-TT*(thesis)", "adap_tt_star:thesis:c16", False, ref),
        ("DP-TT(joint) / DP-SE (± 2 se)", "dp_se_bai", True, ref),
        ("DP-TT(joint) / DP-TT(r)", "dp_tt:r:c16", False, ref),
    ]
    head = ["eps"] + [n for n, _, _, _ in others]
    head += ["DP-TT(joint) / EB-TCI(r)", "DP-TT(h_half) / AdaP-TT(code23)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for e in eps:
        a = cell[(ref, e)]
        out = [f"{float(e):.3g}"]
        for _, c, se, num in others:
            if (c, e) not in cell or (num, e) not in cell:
                out.append("")
                continue
            q, s = ratio(cell[(num, e)], cell[(c, e)])
            out.append(f"{q:.3f} ± {s:.3f}" if se else f"{q:.2f}")
        out.append(f"{ratio(a, eb)[0]:.2f}" if eb else "")
        h, c23 = cell.get(("dp_tt:h_half:c16", e)), cell.get(("adap_tt:code23:c16", e))
        out.append(f"{ratio(h, c23)[0]:.2f}" if h and c23 else "")
        print("| " + " | ".join(out) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
