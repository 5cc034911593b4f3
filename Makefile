# The commands from the README.
.PHONY: run test lint setup

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/chorus console

test: setup
	.venv/bin/python -m pytest -q

# Lint and types (the settings are in pyproject.toml): ruff over the tree, mypy over the engine.
lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy
