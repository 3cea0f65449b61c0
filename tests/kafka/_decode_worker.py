"""A child process that decodes request frames for tests/kafka/test_kafka_request_fuzz.py:
frames in on stdin (a 4-byte length, then the frame), one line out per frame on stdout:
``decoded``, ``refused`` (a FrameError) or ``other <exception>``. An abort of the decoder
ends this process, and so fails the test that sent the frame, not the suite."""

from __future__ import annotations

import sys

from txn_broker.kafka import SUPPORTED, codec


def main() -> None:
    source, out = sys.stdin.buffer, sys.stdout
    while True:
        head = source.read(4)
        if len(head) < 4:
            return
        frame = source.read(int.from_bytes(head, "big"))
        try:
            codec.decode_request(memoryview(bytearray(frame)).toreadonly(), SUPPORTED)
            answer = "decoded"
        except codec.FrameError:
            answer = "refused"
        except Exception as error:  # noqa: BLE001 - reported to the test, which fails on it
            answer = f"other {type(error).__name__}: {error}".replace("\n", " ")
        out.write(answer + "\n")
        out.flush()


if __name__ == "__main__":
    main()
