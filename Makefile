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
# start-ups and TensorFlow imports that leave a core idle (three workers took longer). Grappler is
# off in these tests (tests/README.md).
test: $(STAMP)
	$(BIN)/python -m pytest -q -ra -n 2 --durations=30 -m "not long"

# The checks of minutes each (the demo's 99% after a fixed number of steps; both tiers translating all
# of spa-eng TEST the same; every notebook run through a kernel) and the checks that need a TensorFlow
# process, a browser, a run or an export of their own (tests/README.md), kept out of make test so that
# it stays near 10 minutes; .ci/run runs them. Their functions run many times, so Grappler, off in make test
# (tests/README.md), is on. LONG_MARKS narrows them: .ci/run leaves out the notebooks
# (marked `notebook`), which make test-colab runs under Colab's versions.
LONG_MARKS ?= long
test-long: $(STAMP)
	TFATTN_TEST_GRAPPLER=on $(BIN)/python -m pytest -q -ra -n 2 --durations=25 -m "$(LONG_MARKS)"

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -ra -n 2 -m "not slow and not long"

# The layer tests that run on either Keras backend (no TensorFlow import; outputs read through NumPy),
# under JAX for CPU, in two workers as make test. The prefix overrides the KERAS_BACKEND exported above
# for this command only. The rest of the suite is TensorFlow's by design: tf.function, tf.data,
# tensorflow-text, SavedModel.
JAX_TESTS := tests/layers/test_backends.py tests/layers/test_decoder_paper.py tests/layers/test_keras_conventions.py \
	tests/layers/test_multihead.py tests/layers/test_positions.py

test-jax: $(STAMP)
	KERAS_BACKEND=jax $(BIN)/python -m pytest -q -ra -n 2 $(JAX_TESTS)

# The Colab check (.ci/test-colab says each step): a fresh Python 3.13 virtual environment holding
# Colab's preinstalled versions (.ci/colab-runtime.txt); the package installed into it without
# constraints, as a notebook's install cell does, failing if any of those versions changed; pip check;
# every notebook run through a kernel; then the tests of make test. Python 3.13 is found as python3.13
# on PATH or through pyenv (.ci/python313); COLAB_PY=/path/to/python3.13 names another.
.PHONY: test-colab
test-colab:
	COLAB_PY="$(COLAB_PY)" bash .ci/test-colab

# Benchmarks print one JSON object each. quality.py trains for 15 minutes per model;
# decode.py needs a spa-eng run: make bench-decode RUN=/path/to/run
bench: $(STAMP)
	$(BIN)/python bench/demo.py --seeds 0 1 2
	$(BIN)/python bench/train_throughput.py

bench-quality: $(STAMP)
	$(BIN)/python bench/quality.py --model luong --out runs/quality-luong
	$(BIN)/python bench/quality.py --model bahdanau --out runs/quality-bahdanau

bench-decode: $(STAMP)
	$(BIN)/python bench/decode.py --model $(RUN)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
