# The two commands from the README.
.PHONY: run test setup

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/chorus console

test: setup
	.venv/bin/python -m pytest -q
