"""Real ZooKeeper, Kafka and Pulsar on 127.0.0.1, with no Docker.

The servers are resolved as jars from Maven Central (one tiny POM per server, so their
netty/jackson/slf4j versions never meet), cached outside the work tree, configured from
templates in :mod:`scripts.realservices.servers` and started as child JVMs. A state file
records each pid (with its start time, so a recycled pid is never killed) and the endpoints
the tests connect to.

Run ``python -m scripts.realservices --help``; the Makefile's ``test``, ``services-up``
and ``services-down`` targets call it.
"""
