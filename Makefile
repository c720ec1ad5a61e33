# The two set-up commands of README.md. Both install what they need, so they work on a fresh machine.
PYTHON ?= python3
PIP := $(PYTHON) -m pip install --quiet --disable-pip-version-check

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

install-test:
	$(PIP) -e ".[test]"
	@test -x /usr/bin/chromium -a -x /usr/bin/otf2-print || { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
		otf2-tools >/dev/null; }
