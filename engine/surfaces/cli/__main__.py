import sys

from engine.surfaces.cli import main

sys.exit(main())
