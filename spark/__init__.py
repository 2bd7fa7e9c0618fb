"""PySpark jobs: the audit pipeline over the audit trail, and the segment-aware reader of a
topic's messages (``spark.messages``) with the Parquet export built on it (``spark.export``).

Owns the reconciliation (accepted vs terminal outcomes, duplicates), the hourly report and the
cutover verification, in batch and streaming mode. Imports only ``core``.
"""
