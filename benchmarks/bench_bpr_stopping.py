"""BPR's stopping rule on held-out positives (issue 27): before (fixed 100 epochs) vs after (AUC rule).

Runs `validation.evaluation.implicit_eval.evaluate_implicit` with popularity, BPR-uniform and BPR-popularity
fitted twice (``validate_every=None``: the former fixed 100 epochs; default: the held-out AUC rule of
`implicit_eval.BPR_STOPPING`) on MovieLens 100K P1 and groceries, and the rule alone on T10I4D100K, seed 0.
Prints the table (HR@10, rank score, epochs, CPU s, converged) and the paired 95 % bootstrap interval of
after - before over the same test users (`validation.evaluation.intervals.compare`).

Usage: nice -n 10 python benchmarks/bench_bpr_stopping.py [ml100k|groceries|t10] ...
"""

import sys
import time
from pathlib import Path

import pandas as pd

from validation.evaluation import implicit_eval as ie
from validation.evaluation import intervals

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
SETS = {"ml100k": ("ml-100k", False), "groceries": (str(DATA / "baskets" / "groceries.csv"), True),
        "t10": (str(DATA / "baskets" / "T10I4D100K.dat"), True)}


def main(names):
    pd.set_option("display.width", 250)
    for name in names:
        path, _ = SETS[name]
        df, label, baskets = ie.load_implicit_data(path)
        after = ie.baseline_systems()
        systems = {"popularity": after["popularity"]}
        if name != "t10":
            before = ie.baseline_systems(validate_every=None)
            systems.update({"BPR-uniform (100 epochs)": before["BPR-uniform"], "BPR-uniform (AUC rule)": after["BPR-uniform"],
                            "BPR-popularity (100 epochs)": before["BPR-popularity"],
                            "BPR-popularity (AUC rule)": after["BPR-popularity"]})
        else:
            systems.update({"BPR-uniform (AUC rule)": after["BPR-uniform"], "BPR-popularity (AUC rule)": after["BPR-popularity"]})
        protocols = ["baskets"] if baskets else ["P1"]
        t0 = time.time()
        res = ie.evaluate_implicit(df, systems, protocols=protocols, baskets=baskets, seed=0, progress=True)
        print(f"== {label}: {time.time() - t0:.0f} s wall")
        cols = ["system", "recall@10", "recall@10_se", "rank_score_users", "rank_score_users_se", "iterations",
                "converged", "fit_cpu_seconds", "fit_seconds"]
        print(res.table[cols].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        p = protocols[0]
        if name != "t10":
            for sampling in ("uniform", "popularity"):
                pu = {k[1]: v for k, v in res.per_user.items() if k[0] == p and sampling in k[1]}
                cmp = intervals.compare(pu, ["hit", "rank_score"], main="hit",
                                        baselines=[f"BPR-{sampling} (100 epochs)"])
                print(cmp.differences.to_string(index=False, float_format=lambda v: f"{v:.4f}"))


if __name__ == "__main__":
    main(sys.argv[1:] or ["ml100k", "groceries", "t10"])
