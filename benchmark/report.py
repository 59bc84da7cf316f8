r"""Learning curves and a results table from a grid's TensorBoard event files, offline, in one
command.

    python benchmark/report.py benchmark_runs          # writes benchmark_runs/report/
    python benchmark/report.py benchmark_runs --out report \
        --reference benchmark/reference_results.csv
    python benchmark/report.py benchmark_runs --scripts a2c acer \
        --last-episodes 100                            # the PPO paper's A2C/ACER table
    python benchmark/report.py benchmark/results/speed --speed \
        --out benchmark_runs/speed                     # speed.png from speed.py's tables

Reads every run under the grid root (benchmark/run.py's layout,
OUT/<script>/<env>/seed_<seed>/runs/<run_name>/, or any folder of run directories named
<env>__<script>__<seed>__<time>) with tensorboard's own event reader, groups the runs by script and
env across seeds, and writes:
    <env>.png   eval/episodic_return (greedy policy) against env steps: the mean over seeds with a
                band of one standard deviation, one line per script, the published numbers of
                --reference over the curves and clear of the frame's edges (one within the curve's
                steps as a point at its step, with its ± as an error bar; of those beyond, the
                furthest, and any whose steps are not a count such as 100k or 1M, as dotted lines),
                the legend under the axes, the band kept within the env's return bounds where
                RETURN_BOUNDS knows them. A seed
                with fewer than MIN_EVALS evaluations is warned about, and its script's line shows
                the training return (the mean of the last K charts/episodic_return) instead;
    results.md  the final return of each (script, env): the last evaluation of each seed, as mean ±
                std and the interquartile mean (IQM: the mean of the middle half of the seeds, a
                quarter trimmed from each end, rounded down, as scipy.stats.trim_mean(x, 0.25)); the
                training return, the mean of each seed's last K charts/episodic_return
                (--last-episodes K), as mean ± std over seeds; and the published numbers of
                --reference beside them.
<env> is the env id as run names hold it (':' and '/' become '-'). A curve of one point is drawn as
a marker. It warns, one line each, about a run that has not finished (its folder holds no `finished`
file: stopped, crashed or still going; the table's seeds count it), about two or more runs of one
script, env and seed, and keeps the newest by the unix time that ends the run name (of equal times,
the last path); about a run without evaluations, which it leaves out; about a seed whose last
evaluation comes before the others', whose final return is then of that earlier step; and about an
events file whose records stop at a truncated or corrupt one (a run killed while writing, a damaged
disk), of which the report uses the whole records before that one and nothing after, as
tensorboard's reader does. With --speed it reads instead the Markdown tables that benchmark/speed.py
--out wrote into ROOT and draws speed.png: a bar per row with a peer, the median ratio of our env
steps/s to the peer's over the rounds or measurements, a whisker from the least to the greatest,
labelled with the script and the flags of our runs.
"""

import argparse
import csv
import glob
import os
import re
import sys
from collections import defaultdict

import numpy as np

EVAL_TAG, TRAIN_TAG = "eval/episodic_return", "charts/episodic_return"
MIN_EVALS = 3  # evaluations a seed needs for its curve to be drawn from them
RETURN_BOUNDS = {  # the least and greatest return of an episode: +1 or -1 a step up to the time limit
    "CartPole-v1": (0, 500),
    "InvertedPendulum-v5": (0, 1000),
    "Acrobot-v1": (-500, 0),
    "MountainCar-v0": (-200, 0),
}


def read_scalars(run_dir: str, tag: str) -> list:
    """[(step, value)] of one tag, with tensorboard's event reader (purged steps of a resumed run
    dropped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def damaged_record(path: str) -> str | None:
    """Where an events file's records stop at a truncated or corrupt one, or None where it reads to
    its end. tensorboard's reader stops there without a word (it takes the rest for a record still
    being written); this walks the file with that reader's own record parser."""
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

    reader = pywrap_tensorflow.PyRecordReader_New(path.encode())
    records = 0
    try:
        while True:
            reader.GetNext()
            records += 1
    except errors.OutOfRangeError:
        return None
    except errors.DataLossError as e:
        damage = "a truncated record" if "truncated" in str(e) else "a corrupt record (a failed crc32 check)"
        return f"{damage} after {records} whole one(s)"
    finally:
        reader.file_handle.close()


def find_runs(root: str, scripts=None) -> dict:
    """{(script, env): {seed: run_dir}} for every run directory below root that holds event files
    (of `scripts` only, when given); of runs sharing a script, env and seed, the newest by the unix
    time that ends the name, with a warning."""
    found = defaultdict(list)
    for run_dir in sorted(
        {
            os.path.dirname(events)
            for events in glob.glob(os.path.join(root, "**", "events.out.tfevents.*"), recursive=True)
        }
    ):
        parts = os.path.basename(run_dir).split("__")  # env__script__seed__time; an --exp-name may hold "__"
        if len(parts) >= 4 and parts[-2].isdigit() and parts[-1].isdigit():
            env_id, script, seed, started = parts[0], "__".join(parts[1:-2]), parts[-2], parts[-1]
            if not scripts or script in scripts:
                found[(script, env_id, int(seed))].append((int(started), run_dir))
    runs = defaultdict(dict)
    for (script, env_id, seed), candidates in sorted(found.items()):
        runs[(script, env_id)][seed] = kept = max(candidates)[1]
        if len(candidates) > 1:
            print(
                f"warning: {len(candidates)} runs of {script} {env_id} seed {seed} "
                f"({', '.join(run_dir for _, run_dir in candidates)}): the report keeps the newest by the unix time "
                f"ending its name: {kept}",
                file=sys.stderr,
            )
    return runs


def training_curves(seeds: dict, last: int, points: int = 50) -> dict:
    """{seed: [(step, mean of the last `last` training returns)]} at `points` steps that every seed
    reached."""
    runs = {seed: np.array(read_scalars(run_dir, TRAIN_TAG)) for seed, run_dir in seeds.items()}
    runs = {seed: run for seed, run in runs.items() if len(run)}
    if not runs:
        return {}
    steps = np.linspace(max(run[0, 0] for run in runs.values()), min(run[-1, 0] for run in runs.values()), points)
    curves = {}
    for seed, run in runs.items():
        smooth = [run[max(0, i + 1 - last) : i + 1, 1].mean() for i in range(len(run))]
        curves[seed] = list(zip(steps.astype(int).tolist(), np.interp(steps, run[:, 0], smooth).tolist()))
    return curves


def band(values: np.ndarray, env_id: str) -> tuple:
    """(mean, low, high) over seeds (axis 0): one standard deviation each side, within the env's
    return bounds."""
    mean, std = values.mean(0), values.std(0)
    low, high = RETURN_BOUNDS.get(env_id, (-np.inf, np.inf))
    return mean, np.clip(mean - std, low, high), np.clip(mean + std, low, high)


def iqm(values) -> float:
    """Interquartile mean: the mean after trimming int(n / 4) values from each end
    (scipy.stats.trim_mean(x, 0.25))."""
    values = np.sort(np.asarray(values, dtype=float))
    cut = len(values) // 4
    return float(values[cut : len(values) - cut].mean())


REFERENCE_COLUMNS = ("script", "env", "steps", "value", "source")


def read_reference(path: str | None) -> dict | str:
    """{(script, env): [row, ...]} from a CSV with columns script, env, steps, value, source; or why
    it can't be read."""
    if not path:
        return {}
    table = defaultdict(list)
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if not set(REFERENCE_COLUMNS) <= set(reader.fieldnames or ()):
                return f"--reference {path} is no CSV with the columns {', '.join(REFERENCE_COLUMNS)}"
            for row in reader:
                table[(row["script"], row["env"])].append(row)
    except (OSError, UnicodeDecodeError) as e:
        return f"--reference {path} cannot be read ({e.strerror if isinstance(e, OSError) else e})"
    return table


def published_value(row: dict) -> float:
    """The number a reference row's value starts with ('−22.45 ± 0.51' gives -22.45)."""
    return float(re.match(r"[-−]?[\d.]+", row["value"].replace(",", "")).group().replace("−", "-"))


def published_steps(row: dict) -> float | None:
    """The env steps of a reference row ('100k' gives 100,000, '1M' 1,000,000); None for any other
    count, such as '200k frames'."""
    match = re.fullmatch(r"([\d.]+)([kM]?)", row["steps"].strip())
    return float(match.group(1)) * {"": 1, "k": 1e3, "M": 1e6}[match.group(2)] if match else None


def published_std(row: dict) -> float | None:
    """The ± of a reference row's value ('1103.4 ± 387.7' gives 387.7), or None."""
    match = re.search(r"±\s*([\d.]+)", row["value"].replace(",", ""))
    return float(match.group(1)) if match else None


def pyplot():
    """matplotlib.pyplot, drawing to files only (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def speed_chart(root: str, out: str) -> int:
    """speed.png from the rows of every speed.py table (*.md) in root; returns the number of
    bars."""
    bars = []  # (label, ratio, least, greatest)
    for path in sorted(glob.glob(os.path.join(root, "*.md"))):
        text = open(path).read()
        if "| ours SPS | SB3 SPS |" not in text:  # a table of another kind (--floor, --before)
            continue
        flags = re.search(r"Our runs with `([^`]*)`", text)
        for cells in (line.strip("| ").split(" | ") for line in text.splitlines() if line.startswith("| `")):
            if "no peer" not in cells[4]:
                least, ratio, greatest = (float(x) for x in cells[5].split(" / "))
                label = f"{cells[0].strip('`')} {flags.group(1) if flags else ''}\n{cells[1]}"
                bars.append((label, ratio, least, greatest))
    if not bars:
        return 0
    os.makedirs(out, exist_ok=True)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 0.3 + 0.55 * len(bars)))
    labels, ratios, least, greatest = zip(*bars)
    ax.barh(range(len(bars)), ratios, xerr=[np.subtract(ratios, least), np.subtract(greatest, ratios)], capsize=3)
    for y, ratio in enumerate(ratios):
        ax.text(0.03, y, f"{ratio:.2f}", va="center", color="white", fontsize=8)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(bars)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="env steps/s, ours / Stable-Baselines3: median\n(whiskers: the least and the greatest)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "speed.png"), dpi=100)
    plt.close(fig)
    return len(bars)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", help="the grid's root directory (benchmark/run.py --out)")
    parser.add_argument("--out", default=None, help="where to write the PNGs and results.md (default: ROOT/report)")
    parser.add_argument(
        "--reference",
        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_results.csv"),
        help="published numbers to place beside ours ('' for none)",
    )
    parser.add_argument("--last-episodes", type=int, default=10, metavar="K", help="training episodes a seed averages")
    parser.add_argument("--scripts", nargs="+", help="report these scripts (run names' exp_name) only")
    parser.add_argument("--speed", action="store_true", help="draw speed.png from benchmark/speed.py's tables in ROOT")
    args = parser.parse_args(argv)
    if args.speed:
        out = args.out or args.root
        if os.path.isfile(out):
            print(f"error: --out {out} is a file: pass a directory", file=sys.stderr)
            return 2
        bars = speed_chart(args.root, out)
        if not bars:
            print(f"error: no speed.py table with a peer in {args.root}", file=sys.stderr)
            return 2
        print(f"wrote {out}/speed.png, {bars} bar(s)")
        return 0
    if args.last_episodes < 1:
        print("error: --last-episodes must be at least 1", file=sys.stderr)
        return 2
    runs = find_runs(args.root, args.scripts)
    missing = sorted(set(args.scripts or []) - {script for script, _ in runs})
    if not runs or missing:
        present = sorted({script for script, _ in find_runs(args.root, None)})
        print(
            f"error: no runs of {', '.join(missing)} under {args.root}; its runs are of {', '.join(present)}"
            if missing and present
            else f"error: no TensorBoard runs under {args.root}",
            file=sys.stderr,
        )
        return 2
    out = args.out or os.path.join(args.root, "report")
    reference = read_reference(args.reference)
    problem = reference if isinstance(reference, str) else None
    if os.path.exists(out) and not os.path.isdir(out):
        problem = f"--out {out} is a file: pass a directory"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    for run_dir in sorted(run_dir for seeds in runs.values() for run_dir in seeds.values()):
        for path in sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
            damage = damaged_record(path)
            if damage:
                print(f"warning: {path} has {damage}: the report uses those and nothing after", file=sys.stderr)

    plt = pyplot()
    rows = [
        "| script | env | seeds | steps | final return: mean ± std | IQM | training return, last "
        f"{args.last_episodes} episodes: mean ± std | published |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by_env = defaultdict(list)
    for (script, env_id), seeds in sorted(runs.items()):
        curves = {seed: read_scalars(run_dir, EVAL_TAG) for seed, run_dir in sorted(seeds.items())}
        for seed in [seed for seed, curve in curves.items() if not curve]:
            has = f"no {EVAL_TAG}" if read_scalars(seeds[seed], TRAIN_TAG) else f"neither {EVAL_TAG} nor {TRAIN_TAG}"
            print(f"warning: {seeds.pop(seed)} has {has}: left out", file=sys.stderr)
            del curves[seed]
        if not curves:
            continue
        finals = [curve[-1][1] for curve in curves.values()]
        unfinished = [seed for seed in curves if not os.path.isfile(os.path.join(seeds[seed], "finished"))]
        for seed in unfinished:  # stopped, crashed or still going (the scripts write `finished` at the end)
            print(
                f"warning: {script} {env_id} seed {seed} has not finished (no `finished` file in {seeds[seed]}): "
                f"its final return is of step {curves[seed][-1][0]:,}",
                file=sys.stderr,
            )
        steps = max(curve[-1][0] for curve in curves.values())
        for seed in [seed for seed, curve in curves.items() if curve[-1][0] < steps]:  # stopped, crashed or running
            print(
                f"warning: {script} {env_id} seed {seed} ends at step {curves[seed][-1][0]:,}, before the others' "
                f"{steps:,}: its final return is of that step",
                file=sys.stderr,
            )
        train = [read_scalars(seeds[seed], TRAIN_TAG)[-args.last_episodes :] for seed in curves]
        train = [np.mean([value for _, value in episodes]) for episodes in train if episodes]
        train = f"{np.mean(train):.1f} ± {np.std(train):.1f}" if train else "-"
        published = (
            "; ".join(f"{r['value']} at {r['steps']} ({r['source']})" for r in reference.get((script, env_id), []))
            or "-"
        )
        rows.append(
            f"| `{script}` | {env_id} | {len(finals)}{f' ({len(unfinished)} unfinished)' if unfinished else ''} | "
            f"{steps:,} | {np.mean(finals):.1f} ± "
            f"{np.std(finals):.1f} | {iqm(finals):.1f} | {train} | {published} |"
        )
        sparse = {seed: len(curve) for seed, curve in curves.items() if len(curve) < MIN_EVALS}
        for seed, count in sparse.items():
            print(
                f"warning: {script} {env_id} seed {seed} has {count} evaluation(s), fewer than {MIN_EVALS}: its "
                f"curve shows the training return, the mean of the last {args.last_episodes} episodes",
                file=sys.stderr,
            )
        train_curves = training_curves(seeds, args.last_episodes) if sparse else {}
        by_env[env_id].append((f"{script}, training return" if train_curves else script, train_curves or curves))
    if not by_env:  # every run left out above: no curve, no row
        print(f"error: no run under {args.root} has an {EVAL_TAG}: nothing to report", file=sys.stderr)
        return 2
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        print(f"error: --out {out}: {e.strerror}: pass a directory that can be written", file=sys.stderr)
        return 2

    for env_id, entries in by_env.items():
        fig, ax = plt.subplots(figsize=(6, 4))
        published = []  # the reference lines' returns
        for label, curves in entries:
            # the steps every seed reached; each seed evaluates at the same steps (every
            # --eval-freq)
            common = sorted(set.intersection(*(set(s for s, _ in curve) for curve in curves.values())))
            mean, low, high = band(np.array([[dict(curve)[s] for s in common] for curve in curves.values()]), env_id)
            color = ax.plot(
                common,
                mean,
                marker="o" if len(common) == 1 else None,  # a point: no line to see
                label=f"{label} ({len(curves)} seeds)",
            )[0].get_color()
            ax.fill_between(common, low, high, alpha=0.25, color=color)
            refs = [(row, published_steps(row)) for row in reference.get((label.split(",")[0], env_id), [])]
            furthest = max((x for _, x in refs if x is not None), default=None)
            for row, x in refs:  # in the script's colour, over the curves, which often reach the same return
                y = published_value(row)
                std = published_std(row) or 0.0
                name = f"published: {row['value']} at {row['steps']} ({re.split(r',| [(]', row['source'])[0]})"
                if x is not None and x <= common[-1]:  # a point at its step
                    published += [y - std, y + std]
                    ax.errorbar(x, y, yerr=std, fmt="D", color=color, markersize=4, capsize=3, zorder=3, label=name)
                elif x is None or x == furthest:  # beyond the curve: the furthest, as a dotted line
                    published.append(y)
                    ax.axhline(y, color=color, linestyle=":", linewidth=1.2, zorder=3, label=name)
        if published:  # the reference lines a tenth of the height inside the frame, not on its edge
            low, high = ax.get_ylim()
            margin = 0.1 * (max(high, *published) - min(low, *published))
            ax.set_ylim(min(low, min(published) - margin), max(high, max(published) + margin))
        ax.set(title=env_id, xlabel="env steps", ylabel="episodic return (mean ± std over seeds)")
        labels = len(ax.get_legend_handles_labels()[1])
        fig.set_size_inches(6, 4 + 0.15 * labels)  # room for the legend under the axes
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.14))
        fig.tight_layout()
        fig.savefig(os.path.join(out, re.sub(r"[:/]", "_", env_id) + ".png"), dpi=100)
        plt.close(fig)

    table = "\n".join(rows) + (
        "\n\nFinal return: the last `eval/episodic_return` of each seed (greedy policy). IQM: "
        "the mean of the middle half of the seeds. Training return: the mean "
        f"of each seed's last {args.last_episodes} `charts/episodic_return`.\n"
    )
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(table)
    print(table)
    print(f"wrote {out}/results.md and {len(by_env)} learning-curve PNG(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
