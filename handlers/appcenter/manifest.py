"""The AppCluster provider as `crhelper providers`, `crhelper contract appcenter` and deploy see it.

Standard library only (no import of the provider): the values are checked against the provider's
own constants by `tests/appcenter/test_appcenter_resource_units.py`.
"""

from __future__ import annotations

from crhelper.manifest import EnvVar, ProviderManifest

manifest = ProviderManifest(
    name="appcenter",
    summary="AppCenter clusters: QingCloud AppCenter packages deployed and run through their lifecycle, "
            "on local processes or ECS instances",
    resource_types=("Custom::AppCluster",),
    handler="handlers.appcenter.provider:provider",
    environment=(
        EnvVar("CRHELPER_APPCENTER_BACKEND", "the backend of clusters without Backend: local or ecs", "local"),
        EnvVar("CRHELPER_APPCENTER_POLL_INTERVAL", "seconds between looks at running service commands and booting nodes", "5"),
        EnvVar("CRHELPER_APPCENTER_STEP_BUDGET", "seconds one invocation walks a lifecycle before it continues in the next",
               "20"),
        EnvVar("CRHELPER_APPCENTER_MAX_SERVICE_TIMEOUT", "a cap on every service's timeout (s)", "86400"),
        EnvVar("CRHELPER_APPCENTER_NODE_TIMEOUT", "seconds nodes may take to read Running after a create or start", "600"),
        EnvVar("CRHELPER_APPCENTER_STORE", "the provider's own state: sqlite:///<path> or "
               "s3://<bucket>/<prefix>?endpoint=…&region=… (OSS when deployed)",
               "sqlite:///$CRHELPER_HOME/appcenter/state.sqlite"),
        EnvVar("CRHELPER_APPCENTER_DEADLINE", "Custom::AppCluster's deadline (s)", "43200"),
        EnvVar("CRHELPER_APPCENTER_HEALTH_INTERVAL", "replaces every health_check and monitor interval (s)",
               "the package's (at least 60)"),
        EnvVar("CRHELPER_APPCENTER_CHECK_INTERVAL", "seconds between looks at running commands within one invocation",
               "the backend's: 0.05 local, 1 on ecs"),
        EnvVar("CRHELPER_TEMPLATE_DIR", "the folder a relative Package is resolved against (the template's)",
               "the working directory"),
    ),
    state_dir="appcenter",
    commands=("appcenter",),
)
