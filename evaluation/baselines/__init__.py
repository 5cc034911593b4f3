"""Earlier models kept to score beside the shipped ones (before/after tables)."""
