import sys

from testbed.cli.commands import main

sys.exit(main())
