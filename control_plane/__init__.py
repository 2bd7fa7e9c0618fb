"""The control plane: REST admin API, web UI, cutover coordinator, CLI, ``httpbus dev``.

Owns ``/v1`` administration of projects, topics and subscriptions, the leader that assigns
subscriptions to workers and coordinates cutovers, the web control plane under ``/ui/``, and
the ``httpbus`` command line. A deployable: imports ``core``, ``metastore`` and ``segments``.
"""
