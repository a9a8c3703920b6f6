# The one interface used by humans, CI and the Dockerfile.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUF_VERSION := 1.75.0
BUF := .tools/node_modules/.bin/buf
PROTOS := $(wildcard proto/callgate/v1/*.proto)
# Imported protos that are not ours (google/rpc/status.proto), vendored so that protoc and buf
# both resolve them offline; their Python modules come from googleapis-common-protos.
PROTO_INCLUDES := -I proto -I third_party/googleapis

.PHONY: install install-langchain install-system run test test-loaded lint typecheck proto proto-check buf-lint check bench image clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

STAMP := $(VENV)/.installed

# Python packages (the project, editable, with its dev tools) into .venv, and the example tool
# plugin (examples/websearch), which a server loads only when its config names it.
install: $(STAMP)
$(STAMP): $(PY) pyproject.toml examples/websearch/pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps -e examples/websearch
	touch $(STAMP)

# langchain-mcp-adapters (it needs mcp 1.x) in a venv of its own, as its users have it: the
# tests drive `callgate mcp` with it from there.
LANGCHAIN := .venv-langchain
install-langchain: $(LANGCHAIN)/.installed
$(LANGCHAIN)/.installed: tests/compat/langchain-requirements.txt
	$(PYTHON) -m venv $(LANGCHAIN)
	$(LANGCHAIN)/bin/python -m pip install --quiet -r tests/compat/langchain-requirements.txt
	touch $@

# Debian packages the tools use: bubblewrap (the Bash sandbox) and ripgrep (Grep); chromium
# only for the web console's browser test (Playwright drives it; no browser is downloaded),
# tmux only for the terminal approver's tests in a real pane.
install-system:
	@if ! command -v bwrap >/dev/null || ! command -v rg >/dev/null || ! command -v tree >/dev/null || ! command -v tmux >/dev/null || ! test -x /usr/bin/chromium || ! ldconfig -p | grep -q libseccomp.so.2; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq bubblewrap libseccomp2 ripgrep tree tmux chromium >/dev/null; \
	  else echo "install bubblewrap, libseccomp2, ripgrep, tree, tmux and chromium (apt-get install bubblewrap libseccomp2 ripgrep tree tmux chromium) for the sandbox, its seccomp filter, fast grep, the command rules' ground-truth test, the terminal approver's pane tests and the console's browser test"; fi; \
	fi

$(BUF):
	mkdir -p .tools && npm install --silent --prefix .tools @bufbuild/buf@$(BUF_VERSION) >/dev/null

# Install and start the server on its embedded defaults: this directory as the workspace, the
# per-user state directory ($XDG_STATE_HOME/callgate or ~/.local/state/callgate: tokens, journal,
# the unix socket) outside it, and 127.0.0.1:50051. The CLI finds the socket and tokens there.
run: install install-system
	$(VENV)/bin/callgate serve

# Install everything and run the whole test suite.
test: install install-langchain install-system
	$(PY) -m pytest -q

# The suite on a loaded machine (tests/loaded.py): two copies side by side while a busy server
# serves sandboxed Bash calls; reports each copy's failures and the busy server's failed calls.
test-loaded: install install-system
	$(PY) tests/loaded.py

# The descriptor set keeps the protos' comments (source info) for server reflection.
proto: install
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m grpc_tools.protoc $(PROTO_INCLUDES) \
	  --python_out=proto --grpc_python_out=proto \
	  --mypy_out=proto --mypy_grpc_out=proto \
	  --include_source_info --include_imports \
	  --descriptor_set_out=proto/callgate/v1/descriptors.binpb $(PROTOS)

# Regenerate into a scratch tree and fail on any difference from the committed code.
proto-check: install
	@tmp=$$(mktemp -d) && \
	mkdir -p $$tmp/callgate/v1 && \
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) -m grpc_tools.protoc $(PROTO_INCLUDES) --python_out=$$tmp --grpc_python_out=$$tmp \
	  --mypy_out=$$tmp --mypy_grpc_out=$$tmp \
	  --include_source_info --include_imports \
	  --descriptor_set_out=$$tmp/callgate/v1/descriptors.binpb $(PROTOS) && \
	for f in $$tmp/callgate/v1/*; do \
	  diff -q $$f proto/callgate/v1/$$(basename $$f) >/dev/null || { echo "proto-check: $$(basename $$f) differs from proto/; run make proto"; rm -rf $$tmp; exit 1; }; \
	done; rm -rf $$tmp; echo "proto-check: generated code is up to date"

buf-lint: $(BUF)
	$(BUF) lint
	$(BUF) format -d --exit-code

lint: install
	$(VENV)/bin/ruff check server client cli tests bench examples
	$(VENV)/bin/ruff format --check server client cli tests bench examples

typecheck: install
	$(VENV)/bin/mypy -p callgate.server -p callgate.client -p callgate.cli
	$(VENV)/bin/mypy tests bench examples/agent_loop.py
	$(VENV)/bin/mypy -p callgate_websearch

check: lint typecheck buf-lint proto-check test

bench: install install-system
	$(PY) bench/run.py
	$(PY) -m bench.cpu
	$(PY) bench/bash.py
	$(PY) bench/load.py
	$(PY) bench/confinement.py
	$(PY) bench/rules.py
	$(PY) -m bench.abuse
	$(PY) bench/console_flood.py

# The sidecar image (needs a container engine; see Dockerfile and deploy/kubernetes/).
image:
	docker build -t callgate .

clean:
	rm -rf $(VENV) $(LANGCHAIN) .tools build dist src/*.egg-info
