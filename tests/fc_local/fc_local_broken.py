"""A module that fails at import time, like a function deployed with a bad dependency."""
raise RuntimeError("broken at import")
