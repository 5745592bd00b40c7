# The two entry points of the README. Both set everything up first (idempotent).
.PHONY: setup demo test lint

setup:
	./scripts/setup.sh

demo: setup
	.venv/bin/threadwise demo

test: setup
	./scripts/test.sh

lint:
	.venv/bin/ruff check .
