import sys

from spark_app.runner import main

sys.exit(main())
