"""A function's own module (imported by fc_local_preload_handler): records the process it was imported in."""
import os

IMPORTED_IN = os.getpid()
