"""Helpers shared by the benchmarks: timing percentiles, peak memory, output files."""
from __future__ import annotations

import json
import platform
import resource
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def percentiles(seconds: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(seconds, dtype=np.float64) * 1000.0
    return {"p50_ms": round(float(np.percentile(arr, 50)), 2), "p95_ms": round(float(np.percentile(arr, 95)), 2),
            "mean_ms": round(float(arr.mean()), 2), "n": int(arr.size)}


def machine() -> dict[str, Any]:
    import os

    # The load average says whether other work shared the CPU during the run.
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "load_average_1m": round(os.getloadavg()[0], 2)}


def save(out_dir: str | Path, name: str, data: dict) -> Path:
    path = Path(out_dir) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"benchmark": name, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
            **data}
    path.write_text(json.dumps(data, indent=2), "utf-8")
    return path


def save_by_size(out_dir: str | Path, name: str, report: dict, columns: Sequence[str],
                 cells: Callable[[dict], Sequence[str]]) -> Path:
    """Save a report of ``report["sizes"]`` rows with the peak memory, and print it as a Markdown table.

    ``columns`` names every column, the first being the size; ``cells`` gives a row's other cells.
    """
    report["peak_rss_mib"] = round(peak_rss_mib(), 1)
    path = save(out_dir, name, report)
    print("\n| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    for size, row in report["sizes"].items():
        print("| " + " | ".join([f"{int(size):,}", *cells(row)]) + " |")
    return path


def timed(fn, *args, **kwargs) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start
