# The commands from the README.
.PHONY: run test fuzz lint setup

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/chorus console

test: setup
	.venv/bin/python -m pytest -q

# The property tests with random seeds and ten times the examples (make test runs them derandomized).
FUZZ_TESTS = tests/test_isolation.py tests/test_hostile_input.py tests/test_search.py
fuzz: setup
	CHORUS_HYPOTHESIS=fuzz .venv/bin/python -m pytest -q $(FUZZ_TESTS)

# Lint and types (the settings are in pyproject.toml): ruff over the tree, mypy over the engine.
lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy
