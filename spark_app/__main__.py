"""`python -m spark_app`: the job runner (`spark_app.runner.runner.main`), or with `offsets` first
the offsets CLI (`spark_app.runner.offsets_cli.main`)."""

import sys

if sys.argv[1:2] == ["offsets"]:
    from spark_app.runner.offsets_cli import main as offsets_main

    sys.exit(offsets_main(sys.argv[2:]))

from spark_app.runner.runner import main

sys.exit(main())
