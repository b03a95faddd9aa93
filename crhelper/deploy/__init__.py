"""`crhelper deploy`: create or update a provider's Function Compute function (deploy.md §3).

`plan` is pure: what the function, its triggers and its async configuration should be, and which
calls turn what FC holds into that (create, update, prune, or nothing). `fc3` and `fc2` make those
calls through `alibabacloud-fc20230330` and `fc2`; `clients` builds the SDK clients from the
credentials and region the Alibaba tools use and turns FC's refusals into what to do next; `oss`
puts code too big for the call in an OSS bucket (boto3's S3 API) for FC to read from there.
"""

from __future__ import annotations

from ..errors import ExplainedError


class DeployError(ExplainedError):
    """A deploy that cannot go on: `problem` says what, `next_step` what to do."""
