"""The ``txn-broker`` command line (entry point :func:`txn_broker.cli.main.main`)."""
