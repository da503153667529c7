"""The command line, ``offload-lab``: one module per group of subcommands; nothing in the library imports it."""
