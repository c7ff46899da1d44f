import os
from pathlib import Path

# pytester's in-process runs drop modules first imported inside them; httpx
# maps httpcore's exceptions by class, so httpcore must be imported out here
# or a second in-process run raises httpcore errors httpx no longer knows.
import httpcore  # noqa: F401

pytest_plugins = ["pytester"]

# pytester points HOME at each test's temporary folder, so every inner run
# would convert the bundled model again (~30 s each).  Inner runs share the
# outer session's converted model instead; tests of the cache set their own.
os.environ.setdefault("PYTEST_SPECDEC_CACHE", str(Path("~/.cache/pytest-specdec").expanduser()))
