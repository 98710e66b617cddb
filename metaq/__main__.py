import sys

from metaq.cli.main import main

sys.exit(main())
