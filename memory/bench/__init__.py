"""Benchmarks: each measures Chorus and a simple baseline on the same data in the same run."""
from __future__ import annotations

import argparse


def run_bench(args: argparse.Namespace, settings: object) -> int:
    kind = args.bench_kind
    if kind == "ingest":
        from .ingest import main
    elif kind == "search":
        from .search import main
    elif kind == "load":
        from .load import main
    elif kind == "event":
        from .event import main
    elif kind == "writer":
        from .writer import main
    elif kind == "answer":
        from .answer import main
    else:
        raise ValueError(f"unknown benchmark {kind}")
    return main(args, settings)
