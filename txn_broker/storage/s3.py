"""Segments in S3 or any S3-compatible store (MinIO), through boto3.

Every setting is passed explicitly (:data:`S3_OPTIONS`, as ``open_store(url, **options)``
or ``connect(storage_options=...)``); nothing is read from or written to the process
environment by this module, so two stores in one process (two Airflow connections, two
brokers) never see each other's endpoint or credentials. A setting that is not given
falls back to what the process itself provides: the endpoint to
``TXN_BROKER_S3_ENDPOINT_URL`` (else AWS), the credentials and region to boto3's own chain
(the ``AWS_*`` variables, profiles, instance roles), as boto3 does for any client.

Transient failures (5xx, throttling, dropped connections, timeouts) are retried under the
broker's one retry policy (:mod:`txn_broker.retry`), botocore itself making a single
attempt; what still fails becomes a StorageUnavailableError (retriable).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

import boto3
import pyarrow as pa
from botocore import __version__ as _botocore_version
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    IncompleteReadError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from ..config import s3_endpoint_url
from ..errors import InvalidConfigError, StoragePermissionError, StorageUnavailableError
from ..redaction import strip_userinfo
from ..retry import DEFAULT_RETRY_BUDGET_MS, retrying
from .base import ObjectData, ObjectInfo, ObjectNotFoundError

T = TypeVar("T")

_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
#: error codes botocore's standard retry mode treats as transient (besides any 5xx)
_TRANSIENT_CODES = {
    "RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete", "Throttling",
    "ThrottlingException", "ThrottledException", "RequestThrottledException", "TooManyRequestsException",
    "SlowDown", "RequestLimitExceeded", "BandwidthLimitExceeded", "ProvisionedThroughputExceededException",
    "InternalError", "ServiceUnavailable", "TransactionInProgressException",
}
_ADDRESSING_STYLES = ("auto", "virtual", "path")
#: error codes that say the request itself is refused: the settings are wrong, and no retry
#: can help (StoragePermissionError)
_REFUSED_CODES = {
    "AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket",
    "InvalidBucketName", "AuthorizationHeaderMalformed", "ExpiredToken", "InvalidToken", "AccountProblem",
}

#: a put of more than this many bytes sends a CRC32 checksum; a smaller one relies on its
#: signed SHA-256 (cheaper than botocore's checksum machinery for a few kilobytes)
_CHECKSUM_BYTES = 1 << 20
_USER_AGENT = f"txn-broker botocore/{_botocore_version}"


def _transient(error: BaseException) -> bool:
    if isinstance(error, ClientError):
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        code = error.response.get("Error", {}).get("Code")
        return status >= 500 or status == 429 or code in _TRANSIENT_CODES
    return isinstance(error, BotoConnectionError | HTTPClientError | IncompleteReadError)


class S3ObjectStore:
    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 region_name: str | None = None, aws_access_key_id: str | None = None,
                 aws_secret_access_key: str | None = None, aws_session_token: str | None = None,
                 addressing_style: str | None = None,
                 retry_budget_ms: int = DEFAULT_RETRY_BUDGET_MS) -> None:
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        self.url = f"s3://{bucket}/{prefix}"
        if (aws_access_key_id is None) != (aws_secret_access_key is None):
            raise InvalidConfigError("S3 storage needs both aws_access_key_id and aws_secret_access_key, or neither")
        if aws_session_token is not None and aws_access_key_id is None:
            raise InvalidConfigError("S3 storage option aws_session_token needs aws_access_key_id and "
                                     "aws_secret_access_key")
        if addressing_style is not None and addressing_style not in _ADDRESSING_STYLES:
            raise InvalidConfigError(f"S3 storage option addressing_style must be one of {_ADDRESSING_STYLES}, "
                                     f"got {addressing_style!r}")
        self._config = Config(
            retries={"total_max_attempts": 1, "mode": "standard"},  # txn_broker.retry decides
            connect_timeout=5,
            read_timeout=30,
            # the process's threads share one client (see _client): connections for many
            # uploading producers and reading listener threads at once (made as needed)
            max_pool_connections=64,
            s3={"addressing_style": addressing_style} if addressing_style else None,  # type: ignore[arg-type]
            # What a small put costs in the producer process is mostly botocore's own work
            # per request; these documented settings take the parts that protect nothing:
            # a fixed User-Agent (not rebuilt from ~40 components twice per request),
            # no client-side re-validation of the parameters we build, and a payload
            # checksum only where put() asks for one (large objects, see _CHECKSUM_BYTES).
            # A small body is still covered: without a checksum header botocore signs its
            # SHA-256 (x-amz-content-sha256), which S3 verifies. Signing and TLS verification
            # stay as botocore's defaults.
            user_agent=_USER_AGENT,
            parameter_validation=False,
            request_checksum_calculation="when_required",
        )
        #: the S3 endpoint (None: AWS); default ``TXN_BROKER_S3_ENDPOINT_URL``
        self.endpoint_url = endpoint_url or s3_endpoint_url()
        self.region_name = region_name
        self.addressing_style = addressing_style
        self._credentials = {"aws_access_key_id": aws_access_key_id,
                             "aws_secret_access_key": aws_secret_access_key,
                             "aws_session_token": aws_session_token}
        self.retry_budget_ms = retry_budget_ms
        self._client_lock = threading.Lock()
        self._shared_client: tuple[int, Any] | None = None  # (the process it was made in, the client)

    def __repr__(self) -> str:
        endpoint = strip_userinfo(self.endpoint_url) if self.endpoint_url else None
        return f"S3ObjectStore({self.url!r}, endpoint_url={endpoint!r})"

    def options(self) -> dict[str, str]:
        """The storage options that open this same store elsewhere (a Spark executor):
        the endpoint and the settings given explicitly. Contains the secret key when one
        was given: hand it on, never print it."""
        values = {"endpoint_url": self.endpoint_url, "region_name": self.region_name,
                  "addressing_style": self.addressing_style, **self._credentials}
        return {name: value for name, value in values.items() if value}

    @property
    def _client(self) -> Any:
        """One client for the process's threads (botocore clients are thread-safe; making
        one costs about 0.1 s of CPU, which a client per thread paid again in every new
        thread of a pool). A forked child makes its own: it must not share its parent's
        connections."""
        shared = self._shared_client
        if shared is not None and shared[0] == os.getpid():
            return shared[1]
        with self._client_lock:  # boto3 sessions are not thread-safe: one is built at a time
            shared = self._shared_client
            if shared is None or shared[0] != os.getpid():
                creds = self._credentials
                session = boto3.session.Session(
                    aws_access_key_id=creds["aws_access_key_id"], aws_secret_access_key=creds["aws_secret_access_key"],
                    aws_session_token=creds["aws_session_token"], region_name=self.region_name)
                shared = (os.getpid(), session.client("s3", endpoint_url=self.endpoint_url, config=self._config))
                self._shared_client = shared
            return shared[1]

    def _call(self, request: Callable[[], T]) -> T:
        """``request`` under the retry policy: transient failures are tried again."""
        return retrying(request, self.retry_budget_ms, retriable=_transient)

    def _fail(self, action: str, key: str, error: Exception) -> StorageUnavailableError | StoragePermissionError:
        detail = error.response.get("Error", {}).get("Code") if isinstance(error, ClientError) else ""
        message = f"S3 {action} of {self.bucket}/{self.prefix}{key} failed: {type(error).__name__} {detail}".strip()
        if detail in _REFUSED_CODES:
            return StoragePermissionError(f"{message}; check the storage settings (endpoint, bucket, credentials)")
        return StorageUnavailableError(message)

    def put(self, key: str, data: ObjectData) -> None:
        # botocore takes bytes or a file object; one copy of a buffer is cheap next to the upload
        body = data if isinstance(data, bytes | bytearray) else memoryview(data).tobytes()
        client = self._client
        request: dict[str, Any] = {"Bucket": self.bucket, "Key": self.prefix + key, "Body": body}
        if len(body) > _CHECKSUM_BYTES:  # hashing a large body: CRC32 is the cheaper integrity check
            request["ChecksumAlgorithm"] = "CRC32"
        try:
            self._call(lambda: client.put_object(**request))
        except (ClientError, BotoCoreError) as error:
            raise self._fail("put", key, error) from None

    @contextmanager
    def writer(self, key: str) -> Iterator[pa.NativeFile]:
        """An in-memory buffer, put as the object when the block ends without an
        exception (an S3 object appears whole when its PUT completes; nothing is sent
        otherwise)."""
        sink = pa.BufferOutputStream()
        yield sink
        self.put(key, sink.getvalue())

    def get(self, key: str) -> bytes:
        client = self._client

        def fetch() -> bytes:
            response = client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            body: bytes = response["Body"].read()
            return body

        try:
            return self._call(fetch)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in _NOT_FOUND:
                raise ObjectNotFoundError(f"object {key} not found in {self.url}") from None
            raise self._fail("get", key, error) from None
        except BotoCoreError as error:
            raise self._fail("get", key, error) from None

    def get_buffer(self, key: str) -> pa.Buffer:
        """The response body, wrapped without a copy."""
        return pa.py_buffer(self.get(key))

    def head(self, key: str) -> ObjectInfo | None:
        client = self._client
        try:
            r = self._call(lambda: client.head_object(Bucket=self.bucket, Key=self.prefix + key))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in _NOT_FOUND:
                return None
            raise self._fail("head", key, error) from None
        except BotoCoreError as error:
            raise self._fail("head", key, error) from None
        return ObjectInfo(key, int(r["ContentLength"]), int(r["LastModified"].timestamp() * 1000))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        client = self._client
        request: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix + prefix}
        while True:
            try:
                page = self._call(partial(client.list_objects_v2, **request))
            except (ClientError, BotoCoreError) as error:
                raise self._fail("list", prefix, error) from None
            for obj in page.get("Contents", []):
                yield ObjectInfo(
                    obj["Key"][len(self.prefix):],
                    int(obj["Size"]),
                    int(obj["LastModified"].timestamp() * 1000),
                )
            if not page.get("IsTruncated"):
                return
            request["ContinuationToken"] = page["NextContinuationToken"]

    def delete(self, keys: Iterable[str]) -> None:
        client = self._client
        batch = [self.prefix + k for k in keys]
        for start in range(0, len(batch), 1000):
            chunk = batch[start:start + 1000]
            try:
                self._call(partial(client.delete_objects, Bucket=self.bucket,
                                   Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True}))
            except (ClientError, BotoCoreError) as error:
                raise self._fail("delete", chunk[0], error) from None

