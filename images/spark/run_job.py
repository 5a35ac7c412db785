import sys

from spark_app.runner.runner import main

sys.exit(main())
