"""The kit's own package: pin -> series -> checkout -> lint/test/e2e -> pr.

Modules further down that list may import modules further up, never the
other way round.
"""

import sys

if sys.version_info < (3, 11):  # noqa: UP036 -- one line instead of a tomllib traceback
    sys.exit(
        f"kit: error: the kit needs Python >= 3.11, this is {sys.version.split()[0]} -- run it "
        "with python3.11+"
    )
