# pytester's in-process runs drop modules first imported inside them; httpx
# maps httpcore's exceptions by class, so httpcore must be imported out here
# or a second in-process run raises httpcore errors httpx no longer knows.
import httpcore  # noqa: F401

pytest_plugins = ["pytester"]
