import sys

from gpurag.cli import main

sys.exit(main())
