"""Thin translators between chat platforms and ``memory.models.Message`` / bot replies."""
