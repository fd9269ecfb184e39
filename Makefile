# Each target creates .venv and installs what it needs, so it works on a fresh machine.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2
export KERAS_BACKEND := tensorflow

.PHONY: demo test test-fast bench clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tfattn demo --attention luong
	$(BIN)/tfattn demo --attention bahdanau

test: $(STAMP)
	$(BIN)/python -m pytest -q -ra

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -ra -m "not slow"

bench: $(STAMP)
	$(BIN)/python bench/demo.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
