# The two set-up commands of README.md. Both install what they need, so they work on a fresh machine.
PYTHON ?= python3
PIP := $(PYTHON) -m pip install --quiet --disable-pip-version-check
# PyTorch's CPU-only wheels (~190 MB); PyPI's torch of the same version is the CUDA build (~2.5 GB with nvidia-*)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: demo test install install-test

# Train the demo GPT-2 on the built-in corpus, trace every thread, analyze the trace, write the HTML report.
demo: install
	$(PYTHON) -m gpt2trace run
	$(PYTHON) -m gpt2trace analyze trace.parquet --html report.html

# The whole test suite, expensive checks included (CI runs exactly this).
test: install-test
	$(PYTHON) -m ruff check .
	$(PYTHON) -m pytest -q

install:
	$(PIP) -e .

# torch first, from its CPU index (a pip configuration's own wheels and indexes still apply); then the rest, whose
# torch pin the CPU build satisfies. chromium and otf2-print come from apt: root, or sudo.
install-test:
	$(PIP) --retries 2 --index-url $(TORCH_INDEX) "$$(sed -n 's/.*"\(torch==[^"]*\)".*/\1/p' pyproject.toml)"
	$(PIP) -e ".[test]"
	@test -x /usr/bin/chromium -a -x /usr/bin/otf2-print || { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
		otf2-tools >/dev/null; }
