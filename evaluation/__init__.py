"""Evaluation on real conversation data: retrieval, writer and answers."""
