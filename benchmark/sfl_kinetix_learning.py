"""Table of the SFL learning check (benchmark/sfl_kinetix_learning.sh): per run of sfl_kinetix_jax.py in RUNS_DIR,
the random-level solve rate of the initial policy (iteration 0) and at the end, the SFL buffer's last statistics, the
filtering share of wall time, SPS and wall minutes; then the mean per arm (SFL, --no-sfl).
    python benchmark/sfl_kinetix_learning.py runs/sfl_learning
"""
import argparse
import glob
import json
import os
import statistics


def read_run(run_dir: str) -> dict:
    config = json.load(open(os.path.join(run_dir, "config.json")))
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    evals, buffer, first_wall, last_wall = [], {}, None, None
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        row = json.loads(line)
        first_wall = row["wall_time"] if first_wall is None else first_wall
        last_wall = row["wall_time"]
        if "charts/solve_rate_random" in row:
            evals.append((row["iteration"], row["charts/solve_rate_random"], row["charts/solve_rate_handmade"]))
        if "sfl/frac_learnable" in row:
            buffer = row
    args = config["args"]
    return {"arm": "no-sfl" if args["no_sfl"] else "sfl", "seed": args["seed"], "status": summary["status"],
            "evals": sorted(evals), "buffer": buffer, "sps": summary.get("SPS", float("nan")),
            "filter_share": summary.get("filter_share", 0.0), "minutes": (last_wall - first_wall) / 60}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs_dir")
    runs_dir = p.parse_args().runs_dir
    runs = [read_run(os.path.dirname(c)) for c in sorted(glob.glob(os.path.join(runs_dir, "*", "summary.json")))]
    if not runs:
        raise SystemExit(f"error: no finished run directory in {runs_dir}")
    print("| arm | seed | status | solve rate random: initial -> final (per eval) | handmade: initial -> final "
          "| buffer 0<p<1 | buffer mean p(1-p) | filter share | SPS | minutes |")
    print("|---|---:|---|---|---|---:|---:|---:|---:|---:|")
    for r in sorted(runs, key=lambda r: (r["arm"], r["seed"])):
        ev, b = r["evals"], r["buffer"]
        curve = " ".join(f"{v:.2f}" for _, v, _ in ev)
        hand = f"{ev[0][2]:.2f} -> {ev[-1][2]:.2f}" if ev else "-"
        print(f"| {r['arm']} | {r['seed']} | {r['status']} | {curve} | {hand} "
              f"| {b.get('sfl/frac_learnable', float('nan')):.2f} | {b.get('sfl/learnability_mean', float('nan')):.3f} "
              f"| {r['filter_share']:.2f} | {r['sps']:.0f} | {r['minutes']:.1f} |")
    for arm in ("sfl", "no-sfl"):
        done = [r for r in runs if r["arm"] == arm and r["evals"]]
        if done:
            first = statistics.mean(r["evals"][0][1] for r in done)
            last = statistics.mean(r["evals"][-1][1] for r in done)
            print(f"{arm}: random-level solve rate {first:.3f} -> {last:.3f} (mean of {len(done)} run(s))")


if __name__ == "__main__":
    main()
