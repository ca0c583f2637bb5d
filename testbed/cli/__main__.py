import sys

from testbed.cli.app import main

sys.exit(main())
