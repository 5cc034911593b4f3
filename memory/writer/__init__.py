"""The memory writer: propose (local model, JSON schema) -> verify (deterministic) -> commit."""
