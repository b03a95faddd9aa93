"""The `crhelper` command."""
