"""Segments in S3 or any S3-compatible store (MinIO), through boto3.

The endpoint comes from ``TXN_BROKER_S3_ENDPOINT_URL``; credentials from the standard
AWS variables, profiles or instance roles. Transient failures (5xx, throttling, dropped
connections, timeouts) are retried by botocore's standard retry mode with exponential
backoff; what still fails becomes a StorageUnavailableError (retriable).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

import boto3
import pyarrow as pa
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ..config import s3_endpoint_url
from ..errors import StorageUnavailableError
from .base import ObjectData, ObjectInfo, ObjectNotFoundError

_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}


class S3ObjectStore:
    def __init__(self, bucket: str, prefix: str = "", *, max_attempts: int = 6,
                 endpoint_url: str | None = None) -> None:
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        self.url = f"s3://{bucket}/{prefix}"
        self._config = Config(
            retries={"max_attempts": max_attempts, "mode": "standard"},
            connect_timeout=5,
            read_timeout=30,
            max_pool_connections=16,
        )
        #: the S3 endpoint (None: AWS); default ``TXN_BROKER_S3_ENDPOINT_URL``
        self.endpoint_url = endpoint_url or s3_endpoint_url()
        self._local = threading.local()

    @property
    def _client(self) -> Any:
        # boto3 sessions are not thread-safe; clients are, but create them per thread
        # anyway so forked or threaded callers never share a half-built one.
        client = getattr(self._local, "client", None)
        if client is None:
            client = boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint_url, config=self._config
            )
            self._local.client = client
        return client

    def _fail(self, action: str, key: str, error: Exception) -> StorageUnavailableError:
        detail = error.response.get("Error", {}).get("Code") if isinstance(error, ClientError) else ""
        return StorageUnavailableError(
            f"S3 {action} of {self.bucket}/{self.prefix}{key} failed after retries: "
            f"{type(error).__name__} {detail}".strip()
        )

    def put(self, key: str, data: ObjectData) -> None:
        # botocore takes bytes or a file object; one copy of a buffer is cheap next to the upload
        body = data if isinstance(data, bytes | bytearray) else memoryview(data).tobytes()
        try:
            self._client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=body)
        except (ClientError, BotoCoreError) as error:
            raise self._fail("put", key, error) from None

    def get(self, key: str) -> bytes:
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=self.prefix + key)
            body: bytes = response["Body"].read()
            return body
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
        try:
            r = self._client.head_object(Bucket=self.bucket, Key=self.prefix + key)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in _NOT_FOUND:
                return None
            raise self._fail("head", key, error) from None
        except BotoCoreError as error:
            raise self._fail("head", key, error) from None
        return ObjectInfo(key, int(r["ContentLength"]), int(r["LastModified"].timestamp() * 1000))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
                for obj in page.get("Contents", []):
                    yield ObjectInfo(
                        obj["Key"][len(self.prefix):],
                        int(obj["Size"]),
                        int(obj["LastModified"].timestamp() * 1000),
                    )
        except (ClientError, BotoCoreError) as error:
            raise self._fail("list", prefix, error) from None

    def delete(self, keys: Iterable[str]) -> None:
        batch = [self.prefix + k for k in keys]
        for start in range(0, len(batch), 1000):
            chunk = batch[start:start + 1000]
            try:
                self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
                )
            except (ClientError, BotoCoreError) as error:
                raise self._fail("delete", chunk[0], error) from None
