#!/bin/sh
# One-shot set-up of MinIO for the broker (compose service minio-init, image minio/mc):
# the segment bucket, and a service account limited to that bucket, so the broker never
# holds MinIO's root credentials. Idempotent: re-running resets the account's secret.
# Uses shell built-ins only: the minio/mc image has no grep or sed.
set -eu

: "${MINIO_ROOT_USER:?}" "${MINIO_ROOT_PASSWORD:?}"
: "${BROKER_S3_BUCKET:?}" "${BROKER_S3_ACCESS_KEY_ID:?}" "${BROKER_S3_SECRET_ACCESS_KEY:?}"
endpoint="${MINIO_ENDPOINT:-http://minio:9000}"
policy=txn-broker-segments

mc alias set local "$endpoint" "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null
mc mb --ignore-existing "local/$BROKER_S3_BUCKET"

# Objects are written once, read, and deleted by retention and garbage collection;
# multipart permissions cover large segment uploads.
printf '%s\n' "{
  \"Version\": \"2012-10-17\",
  \"Statement\": [
    {\"Effect\": \"Allow\",
     \"Action\": [\"s3:GetBucketLocation\", \"s3:ListBucket\", \"s3:ListBucketMultipartUploads\"],
     \"Resource\": [\"arn:aws:s3:::$BROKER_S3_BUCKET\"]},
    {\"Effect\": \"Allow\",
     \"Action\": [\"s3:GetObject\", \"s3:PutObject\", \"s3:DeleteObject\",
                \"s3:AbortMultipartUpload\", \"s3:ListMultipartUploadParts\"],
     \"Resource\": [\"arn:aws:s3:::$BROKER_S3_BUCKET/*\"]}
  ]
}" > /tmp/policy.json
mc admin policy create local "$policy" /tmp/policy.json
mc admin user add local "$BROKER_S3_ACCESS_KEY_ID" "$BROKER_S3_SECRET_ACCESS_KEY" >/dev/null
if ! out=$(mc admin policy attach local "$policy" --user "$BROKER_S3_ACCESS_KEY_ID" 2>&1); then
    case "$out" in
        *already*) ;;  # attached by an earlier run
        *) printf '%s\n' "$out" >&2; exit 1 ;;
    esac
fi
echo "minio-init: bucket $BROKER_S3_BUCKET ready; access for $BROKER_S3_ACCESS_KEY_ID limited to it"
