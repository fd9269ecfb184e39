# Each target creates .venv and installs what it needs, so it works on a fresh machine.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2
export KERAS_BACKEND := tensorflow

.PHONY: demo test test-fast test-long test-jax bench bench-quality bench-decode clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tfattn demo --attention luong
	$(BIN)/tfattn demo --attention bahdanau

# Two pytest workers, one per core of a 2-core machine: most tests are chains of small ops, process
# start-ups and TensorFlow imports that leave a core idle.
test: $(STAMP)
	$(BIN)/python -m pytest -q -ra -n 2 --durations=10 -m "not long"

# The checks of minutes each (the demo's 99% after a fixed number of steps; both tiers translating all
# of spa-eng TEST the same), kept out of make test so that it stays under 15 minutes; .ci/run runs them.
test-long: $(STAMP)
	$(BIN)/python -m pytest -q -ra -n 2 -m long

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -ra -n 2 -m "not slow"

# The layer tests that run on either Keras backend (no TensorFlow import; outputs read through NumPy),
# under JAX for CPU. The prefix overrides the KERAS_BACKEND exported above for this command only. The
# rest of the suite is TensorFlow's by design: tf.function, tf.data, tensorflow-text, SavedModel.
JAX_TESTS := tests/layers/test_backends.py tests/layers/test_decoder_paper.py tests/layers/test_keras_conventions.py \
	tests/layers/test_multihead.py tests/layers/test_positions.py

test-jax: $(STAMP)
	KERAS_BACKEND=jax $(BIN)/python -m pytest -q -ra $(JAX_TESTS)

# The Colab check: a fresh Python 3.13 virtual environment, the package installed as a Colab user
# would (pyproject's ranges, not requirements.txt) with Colab's preinstalled versions held as
# constraints, pip check, then the tests not marked slow. COLAB_PY may name another Python 3.13.
COLAB_PY    ?= /root/.pyenv/versions/3.13.0/bin/python3.13
COLAB_VENV  := .venv-colab
COLAB_PINS  := .ci/colab-constraints.txt

.PHONY: test-colab
test-colab:
	@command -v $(COLAB_PY) >/dev/null || { echo "test-colab: no Python 3.13 at $(COLAB_PY); install it (pyenv install 3.13.0) or pass COLAB_PY=/path/to/python3.13" >&2; exit 1; }
	@$(COLAB_PY) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 13) else "test-colab: $(COLAB_PY) is Python " + sys.version.split()[0] + ", not 3.13")'
	rm -rf $(COLAB_VENV)
	$(COLAB_PY) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/pip install -q --progress-bar off ".[all]" -c $(COLAB_PINS)
	$(COLAB_VENV)/bin/pip check
	$(COLAB_VENV)/bin/pip list --format=freeze | grep -iE '^(tensorflow|tensorflow-text|keras|numpy|protobuf)=='
	$(COLAB_VENV)/bin/python -m pytest -q -ra -n 2 -m "not slow and not long" --durations=10

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
