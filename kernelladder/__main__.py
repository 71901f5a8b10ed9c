import sys

from kernelladder.cli import main

sys.exit(main())
