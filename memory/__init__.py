"""Chorus memory engine: store, embeddings, search, writer, query pipeline and datasets.

The engine is the bottom layer: it imports nothing from ``bot``, ``adapters`` or ``benchmarks``
and no chat platform library (discord, slack_sdk, slack_bolt, aiohttp), so it can be embedded and
tested without them. ``tests/test_layers.py`` checks every import, including those inside functions.

The first thing it does is switch off every dependency's telemetry (``memory.offline``): nothing phones home.
"""
from .offline import opt_out

opt_out()
