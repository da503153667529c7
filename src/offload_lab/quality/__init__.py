"""Answer quality: does the local stack answer as well as the vendor's API on the same items?

The package is split by concern:

- :mod:`.data`: the benchmark files (sha256-checked) and their items;
- :mod:`.subsets`: the fixed item subsets, chosen once with a recorded seed and stored in the package;
- :mod:`.benchmarks`: how an item becomes a request (prompt, stops, token budget);
- :mod:`.endpoints`: per-backend request settings (vLLM, the DeepSeek API, any OpenAI-compatible server);
- :mod:`.runner`: requests with concurrency, retries and per-item artefacts;
- :mod:`.canaries`: checks that an endpoint continues a partial answer and does not think when told not to;
- :mod:`.gsm8k`, :mod:`.ifeval`, :mod:`.humaneval`, :mod:`.scoring`: scoring;
- :mod:`.paired`: paired statistics for two systems on the same items;
- :mod:`.compare`: sides against each other, with the noise floor from replicates;
- :mod:`.experiment`: the ``quality`` experiment as the notebook and the CLI run it.
"""

EXPERIMENT = "quality"
SIDE_EXPERIMENT = "quality-side"
