"""The README's table of profile timings, generated from recorded runs (no hand-typed timing).

A *recorded run* is a build's execution report (``_build/execution-report.json``, written by
``python -m attnsvm_book build``) kept in ``notes/runs/`` with the machine it ran on:

    python tools/profile_table.py record _build/execution-report.json notes/runs/quick_DATE.json \\
        [--machine "2-core AMD EPYC VM, 24 GiB, no GPU"] [--note "two notebooks at a time"]

keeps, per notebook, its profile, status, seconds, device and engine (no paths, no worker
addresses), and adds the machine (read from ``/proc/cpuinfo``, ``/proc/meminfo`` and torch
unless ``--machine`` says it), the commit and the report's date. Then

    python tools/profile_table.py table notes/runs/*.json       # the Markdown table
    python tools/profile_table.py check README.md notes/runs/*.json

prints the table (one column per recorded run, its header naming the profile, the machine and
the date) or checks that the README's copy, between ``<!-- profile-table -->`` and
``<!-- /profile-table -->``, is that table (exit 1 naming the first differing line);
``tests/test_readme.py`` runs the check.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

START, END = "<!-- profile-table -->", "<!-- /profile-table -->"
KEEP = ("notebook", "profile", "status", "seconds", "device", "engine", "cached", "reason")


def machine_description() -> str:
    """This machine in a few words: CPU model, cores, memory, GPU."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f", {kb / 2 ** 20:.0f} GiB"
    except (OSError, IndexError, ValueError):
        pass
    gpu = "no GPU"
    try:
        import torch  # deferred: only to name a GPU
        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return f"{os.cpu_count()}-core {cpu}{mem}, {gpu}"


def record(report_path, out_path, machine=None, note=None, commit=None) -> dict:
    """Keep an execution report as a recorded run (see the module's docstring)."""
    report = json.loads(Path(report_path).read_text())
    if commit is None:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], text=True,
                                capture_output=True).stdout.strip() or "unknown"
    run = {"date": report["generated"], "machine": machine or machine_description(),
           "commit": commit, "note": note or "", "packages": report.get("packages", {}),
           "notebooks": [{k: r.get(k) for k in KEEP} for r in report["notebooks"]]}
    profiles = {r["profile"] for r in run["notebooks"]}
    if len(profiles) != 1:
        raise ValueError(f"{report_path}: one profile per recorded run, got {sorted(profiles)}")
    run["profile"] = profiles.pop()
    Path(out_path).write_text(json.dumps(run, indent=1) + "\n")
    return run


def _cell(r) -> str:
    if r is None:
        return "not run"
    if r["status"] != "ok":
        return r["status"] + (f": {r['reason']}" if r.get("reason") else "")
    s = r["seconds"]
    return (f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min") + (" (GPU)" if r["device"] not in
                                                                 ("cpu", None) else "")


def table(runs: list[dict]) -> str:
    """The Markdown table of recorded runs: a row per notebook, a column per run."""
    order = []
    for run in runs:
        order += [r["notebook"] for r in run["notebooks"] if r["notebook"] not in order]
    head = [f"`{run['profile']}`: {run['machine']}, {run['date'][:10]} (commit "
            f"`{run['commit']}`)" for run in runs]
    lines = ["| notebook | " + " | ".join(head) + " |", "|---" * (len(runs) + 1) + "|"]
    for nb in order:
        cells = [_cell(next((r for r in run["notebooks"] if r["notebook"] == nb), None))
                 for run in runs]
        lines.append(f"| `{Path(nb).stem}` | " + " | ".join(cells) + " |")
    total = [sum(r["seconds"] or 0 for r in run["notebooks"] if r["status"] == "ok") / 60
             for run in runs]
    lines.append("| sum of the times above | " + " | ".join(f"{t:.1f} min" for t in total) + " |")
    return "\n".join(lines)


def load(paths) -> list[dict]:
    return [json.loads(Path(p).read_text()) for p in sorted(map(str, paths))]


def readme_table(text: str) -> str:
    """The README's copy of the table (between the two markers)."""
    if START not in text or END not in text:
        raise ValueError(f"the README has no {START} ... {END} block")
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def check(readme, runs) -> list[str]:
    """The lines where the README's table differs from the generated one (empty: equal)."""
    have = readme_table(Path(readme).read_text()).splitlines()
    want = table(load(runs)).splitlines()
    bad = [f"line {i + 1}: README {a!r}, generated {b!r}"
           for i, (a, b) in enumerate(zip(have, want)) if a != b]
    if len(have) != len(want):
        bad.append(f"README has {len(have)} lines, the generated table {len(want)}")
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("report")
    r.add_argument("out")
    r.add_argument("--machine")
    r.add_argument("--note")
    t = sub.add_parser("table")
    t.add_argument("runs", nargs="+")
    c = sub.add_parser("check")
    c.add_argument("readme")
    c.add_argument("runs", nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        run = record(args.report, args.out, args.machine, args.note)
        print(f"{args.out}: {len(run['notebooks'])} notebooks, {run['profile']}, {run['machine']}")
    elif args.cmd == "table":
        print(table(load(args.runs)))
    else:
        bad = check(args.readme, args.runs)
        for line in bad:
            print(line, file=sys.stderr)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
