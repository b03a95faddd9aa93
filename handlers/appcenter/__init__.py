"""QingCloud AppCenter application packages (issue 13): load, check, fill, render, plan.

Pure domain modules, bottom up: ``problems`` (what every check reports), ``package`` (the files,
from a folder, an archive or an OSS/S3 object), ``config`` (the deploy form of ``config.json``),
``values`` (the user's values, checked), ``mustache`` (the "improved mustache" renderer),
``cluster`` (the typed rendered cluster), ``locale``, ``plan`` (the lifecycle orders as data) and
``check`` (the whole pipeline); ``cli``/``commands`` are ``crhelper appcenter``. Import submodules
directly; this package module stays empty so a cold start pays only for what it uses.
"""
