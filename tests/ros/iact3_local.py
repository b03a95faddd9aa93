"""Run `iact3` (alibabacloud-ros-iact3) against a local ROS endpoint: run with the iact3 venv's Python.

iact3 has no endpoint setting: its SDK clients are made in `TeaSDKPlugin.__init__`, which takes an
`endpoint` no caller passes. This wrapper gives the ROS plugin's clients the endpoint in
$IACT3_ROS_ENDPOINT (host:port) and protocol 'http', then runs iact3's own command line unchanged:

    IACT3_ROS_ENDPOINT=127.0.0.1:9100 $VENV/bin/python tests/ros/iact3_local.py test run --config-file .iact3.yml

Credentials come from iact3's own lookup (~/.aliyun/config.json, `current` profile). Imports
nothing from crhelper: it runs in iact3's environment, which pins older SDKs.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def _patch(endpoint: str) -> None:
    from iact3.plugin import base_plugin

    original = base_plugin.TeaSDKPlugin.__init__

    def init(self: Any, region_id: str, credential: Any = None, config_kwargs: dict | None = None,
             endpoint_given: str | None = None) -> None:
        kwargs = dict(config_kwargs or {})
        if getattr(self, "product", None) == "ROS":
            kwargs["protocol"] = "http"
            endpoint_given = endpoint
        original(self, region_id, credential, kwargs, endpoint_given)

    base_plugin.TeaSDKPlugin.__init__ = init  # type: ignore[method-assign]


def main() -> None:
    endpoint = os.environ.get("IACT3_ROS_ENDPOINT")
    if not endpoint:
        sys.exit("set IACT3_ROS_ENDPOINT to the local ROS's host:port (`crhelper ros serve` prints it)")
    _patch(endpoint)
    from iact3.main import sync_run

    sys.argv = ["iact3", *sys.argv[1:]]
    sync_run()


if __name__ == "__main__":
    main()
