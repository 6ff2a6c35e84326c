"""The lakehouse's object store as this process reaches it, Spark-free: pyarrow's S3 file system set up from the
variables every S3 client reads (AWS_ENDPOINT_URL, AWS_REGION, the keys), and the check a run and a sensor tick
start with, so that a store away, refused keys or a missing bucket is one error naming the setting instead of a
stack trace in a micro-batch.

The check covers this process's keys (the code location's); the engine reads its own from its environment, so a
wrong key there fails the step's first read or write with S3A's error (docs/object-store.md).
"""

from __future__ import annotations

import functools
from typing import Any

from streaming_pipeline.lakehouse import settings
from streaming_pipeline.lakehouse.errors import StorageError

#: The URI schemes served by the S3 client.
S3_SCHEMES = ("s3://", "s3a://", "s3n://")


def is_object_store(uri: str) -> bool:
    return uri.startswith(S3_SCHEMES)


def bucket_and_key(uri: str) -> tuple[str, str]:
    """(bucket, key prefix) of an `s3a://bucket/key` URI."""
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key.strip("/")


def s3_filesystem() -> Any:
    """pyarrow's S3 file system as fsspec's, for the store the variables name now: AWS_ENDPOINT_URL (path-style
    requests to it), AWS_REGION, and the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (without them, the AWS
    SDK's other sources: a profile, an instance role)."""
    endpoint_url, region = settings.s3_client_settings()
    return s3_filesystem_at(endpoint_url, region, *settings.s3_keys())


@functools.lru_cache(maxsize=4)
def s3_filesystem_at(endpoint_url: str | None, region: str | None, key_id: str | None, secret: str | None) -> Any:
    """pyarrow's S3 file system as fsspec's, for the store at `endpoint_url` (path-style requests; None: AWS) with
    these keys (None: the AWS SDK's other sources)."""
    from fsspec.implementations.arrow import ArrowFSWrapper
    from pyarrow import fs

    options: dict[str, Any] = {"region": region} if region else {}
    if endpoint_url:
        options.update(endpoint_override=endpoint_url, force_virtual_addressing=False)
    if key_id and secret:
        options.update(access_key=key_id, secret_key=secret)
    return ArrowFSWrapper(fs.S3FileSystem(**options))


def delta_rs_location(uri: str) -> tuple[str, dict[str, str]]:
    """The `s3://bucket/key` URI delta-rs takes for an s3a:// (s3://, s3n://) table, and its storage options: the
    store and keys the variables name now, as `s3_filesystem` takes them, with plain http allowed when the
    endpoint is http. The options hold the keys: hand them to delta-rs only, never print them."""
    bucket, key = bucket_and_key(uri)
    endpoint_url, region = settings.s3_client_settings()
    key_id, secret = settings.s3_keys()
    named = {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_REGION": region,
        "AWS_ACCESS_KEY_ID": key_id,
        "AWS_SECRET_ACCESS_KEY": secret,
    }
    options = {name: value for name, value in named.items() if value}
    if endpoint_url and endpoint_url.startswith("http://"):
        options["AWS_ALLOW_HTTP"] = "true"
    return f"s3://{bucket}/{key}" if key else f"s3://{bucket}", options


NOTHING_DONE = "nothing was read or written"
STOPPED_MID_STEP = (
    "the step stopped there: what it committed before stays, and the next run resumes from its checkpoints"
)


def check_reachable(root: str) -> None:
    """Nothing for a local lakehouse; for one on an object store, that the store answers, takes this process's
    keys and has the bucket of `root` (LAKEHOUSE_DIR). Else StorageError naming the setting to look at; no
    secret is in the message. One request: a HEAD of the bucket."""
    error = store_error(root, NOTHING_DONE)
    if error is not None:
        raise error


def store_error(root: str, consequence: str) -> StorageError | None:
    """The StorageError `check_reachable` raises for `root` (its message ending in `consequence`: what came of
    it), or None when the store answers, takes the keys and has the bucket (or `root` is local). A step that failed
    asks this to tell a store that went away from any other failure (STOPPED_MID_STEP)."""
    if not is_object_store(root):
        return None
    from pyarrow import fs

    endpoint_url, region = settings.s3_client_settings()
    store = f"AWS_ENDPOINT_URL={endpoint_url}" if endpoint_url else f"AWS S3 (region {region or 'from the SDK'})"
    bucket, _ = bucket_and_key(root)
    try:
        info = s3_filesystem().fs.get_file_info(bucket)
    except OSError as exc:
        reason = str(exc)
        if "ACCESS_DENIED" in reason or "INVALID_ACCESS_KEY" in reason or "SIGNATURE" in reason.upper():
            return StorageError(
                f"the object store at {store} refused the keys for LAKEHOUSE_DIR={root}: check AWS_ACCESS_KEY_ID "
                f"and AWS_SECRET_ACCESS_KEY ({reason}); {consequence}"
            )
        return StorageError(
            f"the object store of LAKEHOUSE_DIR={root} does not answer at {store}: {reason}. Is it running "
            f"(`streaming-pipeline stack status`)? {consequence[:1].upper()}{consequence[1:]}"
        )
    if info.type == fs.FileType.NotFound:
        return StorageError(
            f"LAKEHOUSE_DIR={root} names bucket {bucket!r}, which does not exist at {store}: create it, or point "
            f"LAKEHOUSE_DIR at a bucket that exists; {consequence}"
        )
    return None
