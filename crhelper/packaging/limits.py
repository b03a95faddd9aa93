"""The sizes Function Compute and ROS accept (deploy.md §2.2), as pure checks."""

from __future__ import annotations

from . import PackagingError

#: Largest zip FC accepts through the API / SDK (`code.zipFile`, base64); 500 MB through OSS.
FC_UPLOAD_LIMIT = 100 * 1024 * 1024
#: ROS `TemplateBody` is at most this many bytes: an inline `Code.ZipFile` must fit in it with the rest.
TEMPLATE_BODY_LIMIT = 524_288


def base64_size(size: int) -> int:
    """Bytes of the base64 text of `size` bytes (what `Code.ZipFile` holds)."""
    return 4 * ((size + 2) // 3)


def size_warnings(size: int, limit: int = FC_UPLOAD_LIMIT) -> list[str]:
    """What to tell the user about a zip of `size` bytes."""
    warnings = []
    if size > limit:
        warnings.append(f"the package is {size:,} bytes, over FC's {limit:,}-byte upload limit through the API: "
                        "upload it to OSS (up to 500 MB) and give OssBucketName/OssObjectName")
    return warnings


def fits_inline(size: int, template_overhead: int = 0, limit: int = TEMPLATE_BODY_LIMIT) -> bool:
    """Whether a zip of `size` bytes, base64-encoded in `Code.ZipFile`, fits in a ROS template."""
    return base64_size(size) + template_overhead <= limit


def require_template_fits(template_body: bytes, limit: int = TEMPLATE_BODY_LIMIT) -> None:
    """Refuse a template (with an inline `Code.ZipFile`) that ROS would reject for its size."""
    if len(template_body) > limit:
        raise PackagingError(f"the template is {len(template_body):,} bytes, over ROS's {limit:,}-byte TemplateBody "
                             "limit (an inline Code.ZipFile is base64, 4/3 of the zip)",
                             "upload the zip to OSS and use Code.OssBucketName/OssObjectName instead of ZipFile")
