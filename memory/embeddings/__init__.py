"""Sentence embeddings behind one protocol (numpy MiniLM by default, any GGUF via llama.cpp)."""
from .base import Embedder, normalize

__all__ = ["Embedder", "normalize"]
