# Each target creates .venv and installs what it needs, so it works on a fresh machine.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2
export KERAS_BACKEND := tensorflow

.PHONY: demo test test-fast bench bench-quality bench-decode clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tfattn demo --attention luong
	$(BIN)/tfattn demo --attention bahdanau

# Two pytest workers, one per core of a 2-core machine: most tests are chains of small ops, process
# start-ups and TensorFlow imports that leave a core idle (pytest 13.1 -> 8.3 minutes there).
test: $(STAMP)
	$(BIN)/python -m pytest -q -ra -n 2 --durations=10

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -ra -n 2 -m "not slow"

# Benchmarks print one JSON object each. quality.py trains for 15 minutes per model;
# decode.py needs a spa-eng run: make bench-decode RUN=/path/to/run
bench: $(STAMP)
	$(BIN)/python bench/demo.py --seeds 0 1 2
	$(BIN)/python bench/train_throughput.py

bench-quality: $(STAMP)
	$(BIN)/python bench/quality.py --attention luong --out runs/quality-luong
	$(BIN)/python bench/quality.py --attention bahdanau --out runs/quality-bahdanau

bench-decode: $(STAMP)
	$(BIN)/python bench/decode.py --model $(RUN)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
