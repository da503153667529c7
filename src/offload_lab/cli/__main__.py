import sys

from offload_lab.cli.main import main

sys.exit(main())
