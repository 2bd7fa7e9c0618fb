"""The producer service: publish with a plain HTTP POST (FastAPI, port 8701).

Owns the produce and batch endpoints, produce tokens and limits, the in-memory view of topics
and produce pointers kept fresh by metastore watches, and this process's part in a cutover.
A deployable: imports ``core``, ``metastore`` and ``segments``, never another deployable.
"""
