"""Chorus memory engine: store, embeddings, search, writer and query pipeline.

Nothing in this package imports a chat platform library.
"""
