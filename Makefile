# Two entry points, each sets up a fresh machine by itself:
#   make book   build and execute the book into _build/html
#   make test   run the whole test suite (it executes every chapter)
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed
BENCH_STAMP = $(VENV)/.installed-bench

# One BLAS thread per process: the machine has two cores and Dask workers
# are processes of their own.
export OMP_NUM_THREADS = 1
export OPENBLAS_NUM_THREADS = 1
export MKL_NUM_THREADS = 1
export PYDEVD_DISABLE_FILE_VALIDATION = 1

.PHONY: book test bench install clean chromium pdf

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dask,book,test]"
	# Build matplotlib's font cache now: a first build would print its notice to
	# stderr, which the strict book treats as an error.
	$(PY) -c "import matplotlib.pyplot" 2>/dev/null
	touch $(STAMP)

install: $(STAMP) chromium

# The layout test of the book measures the built pages in headless Chromium
# (Debian's package; nothing is downloaded by pip or by a browser installer).
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
	  echo "tests/book/test_build_layout.py needs Chromium: run 'sudo apt-get install chromium'" \
	       "(Debian/Ubuntu) or put a chromium executable on PATH." >&2; \
	fi

book: $(STAMP)
	rm -rf _build
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

test: $(STAMP) chromium
	$(PY) -m pytest

# The whole book as one PDF (not part of `make test`): a single-page HTML build,
# printed by headless Chromium once MathJax has typeset it. Offline, like the book.
# The single page is written as book/intro.html (the root document's name) but its
# links are relative to the build's root, where _static and _images are, and
# index.html only redirects to it: a copy at the root is what gets printed.
pdf: $(STAMP) chromium
	rm -rf _build/singlehtml
	$(VENV)/bin/jupyter-book build . --builder singlehtml -W -n --keep-going
	cp _build/singlehtml/book/intro.html _build/singlehtml/kernelref.html
	$(PY) tests/book/chromium.py _build/singlehtml/kernelref.html _build/kernelref.pdf

# The benchmarks' peers (sklearn-rvm's EM); a benchmark whose peer did not install
# says so in its output and compares with the others.
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[dask,book,test,bench]" || \
	  echo "sklearn-rvm did not install: bench_rvm and bench_rvc run without their EM peer" >&2
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf _build $(VENV)
