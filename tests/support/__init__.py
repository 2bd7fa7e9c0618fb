"""The test support kit: what the tests share, in one place (CONVENTIONS rule 16).

- :mod:`.until`: ``until(condition, timeout, what)`` polls against a deadline (and
  ``until_sync`` for code that is not async); never a loop bounded by a count.
- :mod:`.clock`: ``ManualClock``, the clock a test moves by hand.
- :mod:`.audit_sink`: ``nth_event``, the sample audit events of the audit sink tests.
- :mod:`.hook`: the endpoint double, a local webhook endpoint that records and answers as told.
- :mod:`.world`: the delivery world, one builder per backend (``embedded_world``,
  ``kafka_world``, ``pulsar_world``), with ``subscribe``, ``produce`` and ``Running``.
- :mod:`.workers`: worlds with delivery workers (in-process, or processes a test may kill).
- :mod:`.delivery`: the whole platform on the real servers (producer process, control plane,
  worker) for the end-to-end delivery tests.
- :mod:`.processes`: the producer service and a delivery worker as real processes.
- :mod:`.dev`, :mod:`.ui`, :mod:`.ui_pages`, :mod:`.cli`: ``httpbus dev`` as a process, the
  browser, the web UI's forms, the CLI.
- :mod:`.cutover`, :mod:`.contract_api`, :mod:`.migrations`, :mod:`.audit_events`,
  :mod:`.services`: the cutover load and checks, a fake API with the contracts' shapes, the
  migration check, audit events for the Spark jobs, the real servers' endpoints.
- :mod:`.reports`: a report database with a sample reconciliation run and hourly row.
- :mod:`.stacks`: every thread's and task's stack when a test overruns its bound.
- :mod:`.layout`: the repository's root and its packages.

Test modules import from here and from ``tests/contract`` (the contracts every backend meets),
never from one another. Runners, workers and senders are constructed here only.
"""
