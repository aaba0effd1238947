import sys

from loglinear.cli import main

sys.exit(main())
