"""Sentence embeddings behind one protocol: all-MiniLM-L6-v2 through onnxruntime with int8 weights by default
(``embeddings.backend = "minilm-onnx"``), the same model in numpy or llama.cpp, or any GGUF via llama.cpp."""
from .base import Embedder, normalize

__all__ = ["Embedder", "normalize"]
