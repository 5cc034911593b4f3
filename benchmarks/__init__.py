"""Benchmarks (``chorus bench``): each measures Chorus and a simple baseline on the same data in the same run.

They drive the bot and the adapters as well as the engine, so they live above all three,
not inside ``memory/`` (the engine imports nothing above itself; tests/test_layers.py checks).
"""
from __future__ import annotations

import argparse


def run_bench(args: argparse.Namespace, settings: object) -> int:
    """Run the bench ``args.bench_kind`` names; only its module is imported, so one bench's
    optional dependencies (the platform libraries, a model) never stop another."""
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
    elif kind == "catchup":
        from .catchup import main
    elif kind == "scopes":
        from .scopes import main
    elif kind == "analysis":
        from .analysis import main
    else:
        raise ValueError(f"unknown benchmark {kind}")
    return main(args, settings)
