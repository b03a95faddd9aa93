"""Providers shared by the fault tests of several transports (written to files that subprocesses load)."""

from __future__ import annotations

import textwrap

#: A long operation whose second step hangs in the first process that runs it (the test SIGKILLs
#: that process there) and finishes in the next one: `Marker` names the file that tells them apart.
KILLED_STEP_PROVIDER = textwrap.dedent('''
    import os, time
    from pathlib import Path
    from crhelper import InProgress, Provider, Result

    provider = Provider()

    @provider.create("Custom::Steps")
    def create(props, request):
        if request.attempt == 0:
            return InProgress(state={"step": 1}, delay=0.5)
        marker = Path(props["Marker"])
        if not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(120)  # the first process is SIGKILLed here
        return Result(physical_id="steps-1", data={"Attempt": request.attempt})
''')
