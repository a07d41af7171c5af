"""``python -m deepshare`` = the ``deepshare`` command."""

import sys

from deepshare.cli import main

sys.exit(main())
