"""One redaction rule for every credential a URL can carry (txn_broker/redaction.py):
user-info passwords, password query parameters and every driver's credential parameters,
as given and as encoded; file-path parameters (sslkey, passfile) stay visible."""

from __future__ import annotations

import pytest

from txn_broker import mask_url, redact, strip_userinfo, url_secrets

SECRET = "S3cr3t-Value"

DATABASE_FORMS = [
    f"postgresql+psycopg2://alice:{SECRET}@db:5432/broker",
    f"postgresql+psycopg2://db/broker?password={SECRET}",
    f"postgresql+psycopg2://db/broker?user=alice&password={SECRET}",
    f"postgresql+psycopg2://alice@db/broker?sslmode=require&sslpassword={SECRET}&sslkey=/keys/client.key",
    f"postgresql://alice@db/broker?passfile=/home/a/.pgpass&PASSWORD={SECRET}",
    f"postgresql+psycopg2://alice@db/broker?password={SECRET}%2Fx&application_name=etl",
]
OTHER_FORMS = [
    f"s3://AKIAEXAMPLE:{SECRET}@bucket/prefix",
    f"https://minio:9000/bucket/key?X-Amz-Signature={SECRET}&X-Amz-Date=20240101",
    f"https://host/path?aws_secret_access_key={SECRET}&region=eu",
    f"https://account.blob.core.windows.net/c?sas_token={SECRET}",
    f"https://host/x?access_token={SECRET}&client_secret={SECRET}",
]


@pytest.mark.parametrize("url", DATABASE_FORMS)
def test_every_database_credential_form_is_masked(url):
    masked = mask_url(url)
    assert SECRET not in masked and "***" in masked
    assert "db" in masked  # the rest is still there to read
    secrets = url_secrets(url)
    assert SECRET in secrets[0]
    for text in (f"cannot reach {url}", f"error: {url!r} failed", url.replace("%2F", "/")):
        assert SECRET not in redact(text, secrets)
        assert SECRET not in redact(text)  # the rule alone, without the URL's secrets given


@pytest.mark.parametrize("url", OTHER_FORMS)
def test_every_storage_and_endpoint_credential_form_is_masked(url):
    assert SECRET not in strip_userinfo(url)
    assert SECRET not in redact(f"failed: {url} (retrying)")


def test_libpq_settings_in_free_text_and_paths_that_stay_visible():
    text = f"connect(dsn='host=db dbname=b user=alice password={SECRET} sslkey=/k/client.key')"
    assert redact(text) == "connect(dsn='host=db dbname=b user=alice password=*** sslkey=/k/client.key')"
    assert redact("passfile=/home/a/.pgpass key=value user=alice") == "passfile=/home/a/.pgpass key=value user=alice"
    url = "postgresql://alice@db/broker?passfile=%2Fp&sslkey=%2Fk%2Fclient.key"
    assert mask_url(url) == url  # nothing secret: nothing masked
    assert url_secrets(url) == []
