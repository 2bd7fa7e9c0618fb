"""The control plane: the admin REST API, the web UI and the elected roles, by job.

- ``api/`` — thin routers under ``/v1`` and their request and response models;
- ``services/`` — what the API and the UI do (they never import ``api``, ``ui`` or ``leaders``);
- ``leaders/`` — one elected role a module (assignment, cutovers, failover, verified
  migrations, segment retirement, trace indexing), built in one list by ``leaders.roles``;
- ``ui/`` — the web control plane under ``/ui/``, a client of the API (``client.py``);
- ``app.py`` — assembly only.

A deployable: imports ``core``, ``metastore``, ``segments``, ``reports`` and ``spark``. The
``httpbus`` command line is the root package ``cli``.
"""
