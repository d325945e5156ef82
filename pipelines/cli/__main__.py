"""`python -m pipelines.cli`: the `kerneltraj` command."""
import sys

from pipelines.cli import main

sys.exit(main())
