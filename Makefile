# The two entry points of the README. Both set everything up first (idempotent).
.PHONY: setup setup-demo demo test lint notebook

setup:
	./scripts/setup.sh all

# what the demo runs, no more (README "Quick start", docs/demo.md); `make test` adds the rest
setup-demo:
	./scripts/setup.sh demo

demo: setup-demo
	.venv/bin/threadwise demo

test: setup
	./scripts/test.sh

lint:
	.venv/bin/ruff check .

# JupyterLab (pinned in requirements.lock) from .venv on the notebooks; open the printed
# http://127.0.0.1:8888/lab?token=... URL (an SSH tunnel to port 8888 from another machine).
# `exec`: the recipe's shell becomes JupyterLab, so `kill <make's pid>` (make passes SIGTERM to
# its child) stops JupyterLab too instead of orphaning it (tests/test_make_notebook.py).
NOTEBOOK_PORT ?= 8888
notebook: setup
	exec .venv/bin/jupyter lab --notebook-dir=notebooks --ip=127.0.0.1 --port=$(NOTEBOOK_PORT) --no-browser \
		$$([ "$$(id -u)" = 0 ] && echo --allow-root)
