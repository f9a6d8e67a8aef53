"""`python -m gpufleet`: the same command line as `gpufleet`."""

import sys

from gpufleet.cli.main import main

sys.exit(main())
