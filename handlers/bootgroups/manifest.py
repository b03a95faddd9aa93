"""The boot-group provider as `crhelper providers`, `crhelper contract bootgroups` and deploy see it.

Standard library only (no import of the provider): the values are checked against the provider's
own constants by `tests/bootgroups/test_bootgroup_provider_local.py`.
"""

from __future__ import annotations

from crhelper.manifest import EnvVar, ProviderManifest

manifest = ProviderManifest(
    name="bootgroups",
    summary="Instance Boot Groups: tiered, readiness-gated start, stop and reboot of local processes, ECS or CloudStack VMs",
    resource_types=("Custom::InstanceBootGroup", "Custom::LocalInstance"),
    handler="handlers.bootgroups.provider:provider",
    environment=(
        EnvVar("CRHELPER_BOOTGROUP_BACKEND", "the backend of groups without Backend: local, ecs or cloudstack", "local"),
        EnvVar("CRHELPER_BOOTGROUP_POLL_INTERVAL", "seconds between readiness polls (global)", "10"),
        EnvVar("CRHELPER_BOOTGROUP_CHECK_CONCURRENCY", "parallel starts, stops and checks in a tier (global)", "10"),
        EnvVar("CRHELPER_BOOTGROUP_MAX_MEMBERS", "members per boot group (an InstanceGroup counts as one)", "10"),
        EnvVar("CRHELPER_BOOTGROUP_STORE", "the provider's own state: sqlite:///<path> or "
               "s3://<bucket>/<prefix>?endpoint=…&region=… (OSS when deployed)",
               "sqlite:///$CRHELPER_HOME/bootgroups/state.sqlite"),
        EnvVar("CRHELPER_BOOTGROUP_DEADLINE", "Custom::InstanceBootGroup's deadline (s); a plan whose worst case exceeds it "
               "is refused at Create", "43200"),
        EnvVar("CRHELPER_BOOTGROUP_CLOUDSTACK_JOB_WAIT", "seconds a CloudStack start or stop watches its async job "
               "before the engine polls the VM state", "2"),
        EnvVar("CRHELPER_BOOTGROUP_CLOUDSTACK_RETRY_SECONDS", "how long a transient CloudStack API error is retried", "10"),
        EnvVar("CRHELPER_BOOTGROUP_CLOUDSTACK_REBOOT_WAIT", "seconds a reboot on retry waits for the VM to read Running again", "300"),
        EnvVar("CRHELPER_BOOTGROUP_STEP_SECONDS", "seconds one invocation advances a start before it continues in the next", "60"),
    ),
    state_dir="bootgroups",
    commands=("bootgroups",),
)
